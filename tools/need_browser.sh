#!/bin/sh
# Browser tests drive Debian's chromium by executable path (Playwright never downloads a browser:
# its CDN is out of reach on our machines). Install chromium from Debian when we can, else fail
# saying what is missing: a browser test without a browser cannot pass.
set -e
CHROMIUM="${PROOFPOOL_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if [ -n "$PROOFPOOL_CHROMIUM" ]; then
    echo "error: PROOFPOOL_CHROMIUM=$PROOFPOOL_CHROMIUM is not an executable file." >&2
    exit 1
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium (for the browser tests) with apt-get"
    # A fresh machine's apt lists may not know the package yet: update only then.
    if ! apt-cache show chromium >/dev/null 2>&1; then
        apt-get update -qq
    fi
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null && [ -x "$CHROMIUM" ]; then
        exit 0
    fi
    echo "error: apt-get could not install chromium to $CHROMIUM." >&2
    exit 1
fi
echo "error: chromium is missing ($CHROMIUM): the browser tests need it." >&2
echo "       install it with: sudo apt-get install chromium" >&2
echo "       or point PROOFPOOL_CHROMIUM at a Chromium executable." >&2
exit 1
