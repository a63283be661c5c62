"""Files built to hurt the validator: each gets a verdict, and the validator's memory stays small.

The hostile files are forged at the byte level, because pyarrow never writes a lying file: a minimal
Thrift compact codec below re-encodes the footer and page headers of an honest file (sizes that lie,
a page of hundreds of millions of run-length encoded tokens, floods of empty row groups). Files that
would make the old code allocate gigabytes are checked in a subprocess under an address-space limit
(`_check_in_subprocess`), which also reports the checking process's peak RSS.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from proofpool.validator.checks import decode
from proofpool.validator.checks.decode import ChildLimits, DecodeChildError, run_in_child
from proofpool.validator.checks.file import parse_file, read_file
from proofpool_arithmetic.tokenizer import EOS_ID

from proofpool.core.rollout import ROLLOUT_SCHEMA
from proofpool.infra.config import REPO_ROOT
from tests.unit.test_validator_checks import HONEST, META, RULES, cheap, submission

MIB: Final = 2**20

# --- a minimal Thrift compact protocol codec (Parquet's metadata encoding) -------------------------

_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)


@dataclass
class TList:
    """A Thrift list: its element type and items."""

    etype: int
    items: list[Any]


Struct = list[list[Any]]
"""A Thrift struct as [field id, type, value] triples in file order (so it re-encodes byte for byte)."""


class _Reader:
    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def byte(self) -> int:
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self) -> int:
        shift = out = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return out

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, kind: int) -> Any:
        if kind in (_TRUE, _FALSE):
            return kind == _TRUE
        if kind == _BYTE:
            return self.byte()
        if kind in (_I16, _I32, _I64):
            return self.zigzag()
        if kind == _DOUBLE:
            self.pos += 8
            return struct.unpack_from("<d", self.data, self.pos - 8)[0]
        if kind == _BINARY:
            n = self.varint()
            self.pos += n
            return self.data[self.pos - n : self.pos]
        if kind in (_LIST, _SET):
            head = self.byte()
            size = head >> 4 if head >> 4 != 15 else self.varint()
            return TList(head & 0x0F, [self.value(head & 0x0F) for _ in range(size)])
        if kind == _STRUCT:
            return self.struct()
        raise ValueError(f"Thrift type {kind} is not used by Parquet metadata")

    def struct(self) -> Struct:
        fields: Struct = []
        last = 0
        while head := self.byte():
            fid = last + (head >> 4) if head >> 4 else self.zigzag()
            fields.append([fid, head & 0x0F, self.value(head & 0x0F)])
            last = fid
        return fields


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes([*out, n])


def _encode(kind: int, value: Any) -> bytes:
    if kind in (_TRUE, _FALSE):
        return b""
    if kind == _BYTE:
        return bytes([value])
    if kind in (_I16, _I32, _I64):
        return _varint((value << 1) ^ (value >> 63))
    if kind == _DOUBLE:
        return struct.pack("<d", value)
    if kind == _BINARY:
        return _varint(len(value)) + bytes(value)
    if kind in (_LIST, _SET):
        n = len(value.items)
        head = bytes([n << 4 | value.etype]) if n < 15 else bytes([0xF0 | value.etype]) + _varint(n)
        return head + b"".join(_encode(value.etype, item) for item in value.items)
    return encode_struct(value)


def encode_struct(fields: Struct) -> bytes:
    out, last = bytearray(), 0
    for fid, kind, value in fields:
        kind = (_TRUE if value else _FALSE) if kind in (_TRUE, _FALSE) else kind
        out += bytes([(fid - last) << 4 | kind]) if 0 < fid - last <= 15 else bytes([kind]) + _varint(fid << 1)
        out += _encode(kind, value)
        last = fid
    return bytes(out) + b"\x00"


def get(fields: Struct, fid: int) -> list[Any]:
    """The [id, type, value] triple of field `fid` (mutable: assign to [2])."""
    return next(f for f in fields if f[0] == fid)


# --- forging Parquet files -------------------------------------------------------------------------


def split_footer(data: bytes) -> tuple[bytes, Struct]:
    """The file's bytes before the footer, and the footer (FileMetaData) decoded."""
    (length,) = struct.unpack("<I", data[-8:-4])
    return data[: -8 - length], _Reader(data[-8 - length : -8]).struct()


def join_footer(body: bytes, footer: Struct) -> bytes:
    encoded = encode_struct(footer)
    return body + encoded + struct.pack("<I", len(encoded)) + b"PAR1"


def _extend_last_run(buf: bytes, bit_width: int, extra: int) -> bytes:
    """An RLE/bit-packed hybrid buffer with its last run-length run `extra` values longer."""
    reader, last = _Reader(buf), None
    while reader.pos < len(buf):
        start, header = reader.pos, reader.varint()
        if header & 1:  # bit-packed groups of 8 values
            reader.pos += (header >> 1) * bit_width
        else:
            last = (start, reader.pos, header >> 1)
            reader.pos += (bit_width + 7) // 8
    assert last is not None, "no run-length run to extend"
    start, value_at, count = last
    return buf[:start] + _varint((count + extra) << 1) + buf[value_at:]


def _bomb_page(header: Struct, page: bytes, extra: int) -> bytes:
    """A DATA_PAGE_V2 of a list<int32> column with `extra` more values in its last row (header updated)."""
    v2 = get(header, 8)[2]
    rep_len, def_len = get(v2, 6)[2], get(v2, 5)[2]
    rep = _extend_last_run(page[:rep_len], 1, extra)
    dfn = _extend_last_run(page[rep_len : rep_len + def_len], 1, extra)
    values = page[rep_len + def_len :]
    values = values[:1] + _extend_last_run(values[1:], values[0], extra)  # dictionary indices: width byte
    get(v2, 1)[2] += extra
    get(v2, 6)[2], get(v2, 5)[2] = len(rep), len(dfn)
    page = rep + dfn + values
    get(header, 2)[2] = get(header, 3)[2] = len(page)
    return page


def rle_bomb(extra: int, footer_values: int = 1) -> bytes:
    """An honest one-row file whose completion's one dictionary-encoded run gets `extra` more tokens.

    The rewritten column chunk is appended after the others and the footer pointed at it, keeping
    every other offset; the footer keeps claiming `footer_values` values and its old sizes.
    """
    table = pa.table(
        {
            name: pa.array([value], field.type)
            for (name, value), field in zip(_ONE_ROW.items(), ROLLOUT_SCHEMA, strict=True)
        }
    ).replace_schema_metadata(META.to_metadata())
    buffer = io.BytesIO()
    pq.write_table(table, buffer, use_dictionary=True, data_page_version="2.0", compression="none")
    data = buffer.getvalue()
    body, footer = split_footer(data)
    chunk = get(get(footer, 4)[2].items[0], 1)[2].items[3]  # completion_tokens
    meta = get(chunk, 3)[2]
    start, end = get(meta, 11)[2], get(meta, 11)[2] + get(meta, 7)[2]
    new_chunk, pos = bytearray(), start
    while pos < end:
        reader = _Reader(data, pos)
        header = reader.struct()
        page = data[reader.pos : reader.pos + get(header, 3)[2]]
        pos = reader.pos + len(page)
        if get(header, 1)[2] == 3:  # DATA_PAGE_V2
            get(meta, 9)[2] = len(body) + len(new_chunk)
            page = _bomb_page(header, page, extra)
        new_chunk += encode_struct(header) + page
    get(meta, 11)[2] = get(chunk, 2)[2] = len(body)
    get(meta, 7)[2], get(meta, 5)[2] = len(new_chunk), footer_values
    return join_footer(body + bytes(new_chunk), footer)


_ONE_ROW: Final = {
    "problem_id": "add-1-2",
    "group_id": 0,
    "prompt_tokens": [1, 2, 3],
    "completion_tokens": [EOS_ID] * 64,
    "reward": 0.0,
    "advantage": 0.0,
    "sampling_seed": 1,
    "temperature": 1.0,
    "model_version": 3,
    "proofs": b"",
}


def empty_row_groups(count: int) -> bytes:
    """The honest file with `count` row groups of no rows and no columns added to its footer."""
    body, footer = split_footer(HONEST)
    get(footer, 4)[2].items += [[[1, _LIST, TList(_STRUCT, [])], [2, _I64, 0], [3, _I64, 0]]] * count
    return join_footer(body, footer)


def lying_sizes(data: bytes) -> bytes:
    """`data` with every column chunk claiming one value and 1 byte decoded."""
    body, footer = split_footer(data)
    for group in get(footer, 4)[2].items:
        for chunk in get(group, 1)[2].items:
            meta = get(chunk, 3)[2]
            get(meta, 5)[2], get(meta, 6)[2] = 1, 1
    return join_footer(body, footer)


# --- the checks in a memory-limited process ---------------------------------------------------------

_HARNESS: Final = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from tests.unit.test_validator_checks import RULES, submission
from proofpool.validator.checks import run_checks
import proofpool.validator.checks.run
if {today!r}:
    sys.path.insert(0, {today!r})
    import file_today
    proofpool.validator.checks.run.read_file = file_today.read_file
data = sys.stdin.buffer.read()
with open("/proc/self/statm") as statm:
    mapped = int(statm.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, ({cap} + mapped, resource.RLIM_INFINITY))
started = time.monotonic()
try:
    verdict = run_checks(data, submission(data, work_units=8), RULES, None, sample_rate=0)
    answer = {{"reason": verdict.reason, "evidence": verdict.evidence}}
except MemoryError:
    answer = {{"reason": "MemoryError escaped", "evidence": {{}}}}
answer["seconds"] = time.monotonic() - started
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across fork and exec, so it would report pytest's peak.
with open("/proc/self/status") as status:
    hwm_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
answer["max_rss_mib"] = hwm_kib / 1024
print(json.dumps(answer))
"""
HARNESS_CAP: Final = 1536 * MIB
"""Address space the checking process may add after its imports: the old code's decoding of these
files runs into it (and shows as MemoryError) instead of into the shared test machine."""


def check_in_subprocess(data: bytes, *, today: str = "") -> dict[str, Any]:
    """`run_checks` on `data` in a fresh process capped at `HARNESS_CAP`: reason, evidence, seconds, peak RSS.

    `today`: a directory holding the old `file_today.py` to measure the code before this change.
    """
    script = _HARNESS.format(root=str(REPO_ROOT), today=today, cap=HARNESS_CAP)
    done = subprocess.run(
        [sys.executable, "-c", script], input=data, capture_output=True, timeout=300, check=False, cwd=REPO_ROOT
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


# --- tests ------------------------------------------------------------------------------------------


def test_the_footer_length_is_capped_before_parsing() -> None:
    """165,000 empty row groups: a 1.2 MiB footer whose parse alone cost the old code gigabytes."""
    data = empty_row_groups(165_000)
    assert len(data) < 2 * MIB
    result = check_in_subprocess(data)
    assert result["reason"] == "file_too_large", result
    assert result["evidence"]["footer_bytes"] > decode.MAX_FOOTER_BYTES
    assert result["max_rss_mib"] < 1024, result


def test_many_row_groups_are_refused_from_the_footer() -> None:
    data = empty_row_groups(2_000)
    verdict = cheap(data, submission(data))
    assert verdict.reason == "too_many_row_groups"
    assert verdict.evidence == {"row_groups": 2_001, "max_row_groups": 64}


def test_footer_that_lies_about_sizes_is_bounded_by_what_is_decoded() -> None:
    """10 million tokens (40 MB decoded) in a 600-byte file whose footer claims one value and 1 byte."""
    data = lying_sizes(rle_bomb(10_000_000))
    assert len(data) < 4096
    small = dataclasses.replace(RULES, max_decoded_bytes=8 * MIB)
    verdict = cheap(data, submission(data, work_units=8), small)
    assert verdict.reason == "file_too_large"
    assert verdict.evidence["decoded_bytes"] > 8 * MIB
    assert verdict.evidence["max_decoded_bytes"] == 8 * MIB


def test_decoded_list_lengths_are_checked_when_the_footer_understates_them() -> None:
    """Under the decoded-size cap, the same lie is caught by the decoded token count, before Python objects."""
    data = rle_bomb(1_000)
    verdict = cheap(data, submission(data, work_units=8))
    assert verdict.reason == "length_out_of_range"
    assert verdict.evidence == {"column": "completion_tokens", "values": 1_064, "max_values": 8}


def test_a_page_of_1_6_gib_is_stopped_by_the_child_memory_cap() -> None:
    """One row of 400 million tokens in a file of a few KiB: one batch decodes 1.6 GiB at once, past
    any running count, so the child's address-space limit stops it; the validator process stays small."""
    data = rle_bomb(400_000_000)
    assert len(data) < 54_000
    result = check_in_subprocess(data)
    assert result["reason"] == "file_too_large", result
    assert result["evidence"]["decode"] in {"memory_cap", "killed"}, result
    assert result["max_rss_mib"] < 1024, result


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def _allocate(size: int) -> bytes:
    return bytes(size)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _fail() -> None:
    raise ValueError("a bug in the checks")


@pytest.mark.parametrize(
    ("target", "args", "decode_evidence"),
    [
        (_allocate, (4 * 2**30,), "memory_cap"),
        (_die, (), "killed"),
        (_sleep, (30.0,), "timeout"),
    ],
)
def test_a_child_that_runs_out_is_a_file_too_large_verdict(target: Any, args: tuple, decode_evidence: str) -> None:
    started = time.monotonic()
    verdict = run_in_child(target, args, ChildLimits(memory_bytes=256 * MIB, timeout_seconds=2.0))
    assert verdict.reason == "file_too_large"
    assert verdict.evidence["decode"] == decode_evidence
    assert time.monotonic() - started < 10


def test_a_bug_in_the_child_is_raised_not_judged() -> None:
    with pytest.raises(DecodeChildError, match="a bug in the checks"):
        run_in_child(_fail, (), ChildLimits(memory_bytes=256 * MIB))


def test_a_thread_reuses_its_child_until_a_call_fails_in_it() -> None:
    limits = ChildLimits(memory_bytes=256 * MIB, timeout_seconds=5.0)
    first = run_in_child(os.getpid, (), limits)
    assert run_in_child(os.getpid, (), limits) == first != os.getpid()  # one child, file after file
    with pytest.raises(DecodeChildError):
        run_in_child(_fail, (), limits)
    after_bug = run_in_child(os.getpid, (), limits)
    assert after_bug != first  # a child a call failed in is replaced
    assert run_in_child(_allocate, (4 * 2**30,), limits).evidence["decode"] == "memory_cap"
    assert run_in_child(os.getpid, (), limits) != after_bug
    other_thread: list[int] = []
    thread = threading.Thread(target=lambda: other_thread.append(run_in_child(os.getpid, (), limits)))
    thread.start()
    thread.join(timeout=60)
    assert other_thread and other_thread[0] not in (first, after_bug, os.getpid())  # a child per thread


def test_honest_file_reads_the_same_through_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    sub = submission(HONEST)
    through_child = read_file(HONEST, sub, RULES)
    assert through_child == parse_file(HONEST, sub, RULES)
    assert cheap(HONEST).accepted
    monkeypatch.setenv(decode.DECODE_IN_CHILD_ENV, "0")
    assert decode.child_limits(RULES.max_decoded_bytes) is None
    assert read_file(HONEST, sub, RULES) == through_child


def test_the_forkservers_warm_up_parses_a_valid_file() -> None:
    """The forkserver preloads `proofpool.validator.checks.preload`, whose warm-up must be a file the checks accept."""
    from proofpool.validator.checks import preload

    preload.warm_up()  # raises if the checks refuse it
    assert "proofpool.validator.checks.preload" in decode._FORKSERVER_PRELOAD
