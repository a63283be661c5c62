#!/bin/sh
# Code-task completions run only inside bubblewrap (bwrap) under prlimit; nothing falls back to
# running them directly. Install bubblewrap from Debian when we can, else say what is missing.
set -e
if command -v bwrap >/dev/null 2>&1 && command -v prlimit >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing bubblewrap (the code-task sandbox) with apt-get"
    apt-get update -qq && apt-get install -y -qq bubblewrap util-linux >/dev/null
    exit 0
fi
echo "warning: bubblewrap (bwrap) or prlimit is missing: code pools will refuse to start." >&2
echo "         install them with: sudo apt-get install bubblewrap util-linux" >&2
