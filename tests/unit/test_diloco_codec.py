"""Pseudo-gradients on the wire: the int8 codec (`proofpool.core.diloco.codec`), the file format
(`...update_file`: every malformed file ends as its reason code, never another exception) and the
comparison with a replay (`...compare`)."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable

import pytest
import torch
from safetensors.torch import save

from proofpool.core.diloco.codec import Quantized, blocks_of, dequantize, quantize
from proofpool.core.diloco.compare import compare_update, relative_l2, tensors_sha256
from proofpool.core.diloco.update_file import (
    UpdateFileError,
    UpdateMeta,
    encode_update,
    read_update,
)

pytestmark = pytest.mark.timeout(60)

SHAPES = {"model.embed.weight": (64, 32), "model.norm.weight": (32,), "lm_head.bias": (3, 5)}
META = UpdateMeta(
    pool_id=3,
    node="0xAbCdEf0123456789aBcDeF0123456789AbCdEf01",
    round=2,
    base_manifest_sha256="11" * 32,
    spec_sha256="22" * 32,
    codec="int8",
    block_size=256,
    inner_steps=2,
    tokens=2 * 4 * 32,
    losses=(5.5, 5.25),
)


def _gaussian(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _relative_error(q: Quantized, x: torch.Tensor) -> float:
    return float((dequantize(q) - x).norm() / x.norm())


@pytest.fixture
def pseudo_gradient() -> dict[str, torch.Tensor]:
    return {name: _gaussian(*shape, seed=i) * 1e-3 for i, (name, shape) in enumerate(SHAPES.items())}


# The codec.


@pytest.mark.parametrize("block_size", [0, 4096])
def test_round_trip_error_is_small_on_gaussian_data(block_size: int) -> None:
    x = _gaussian(4, 4096, seed=1)
    q = quantize(x, block_size)
    assert q.codes.dtype == torch.uint8 and q.codes.shape == x.shape
    assert q.table.dtype == torch.float32 and q.table.shape == (blocks_of(x.numel(), block_size), 256)
    assert _relative_error(q, x) < 0.01


def test_short_last_block_and_blocks_larger_than_the_tensor() -> None:
    x = _gaussian(1000, seed=2)
    q = quantize(x, 300)
    assert q.table.shape == (4, 256) and _relative_error(q, x) < 0.01
    assert quantize(x, 5000).table.shape == (1, 256)
    assert torch.equal(dequantize(quantize(x, 5000)), dequantize(quantize(x, 0)))
    assert blocks_of(1000, 300) == 4 and blocks_of(900, 300) == 3 and blocks_of(0, 300) == 0


def test_values_stay_in_their_bins_and_block_sums_are_preserved() -> None:
    x = _gaussian(3, 700, seed=3)
    q = quantize(x, 512)
    d = dequantize(q).reshape(-1)
    flat = x.reshape(-1)
    for start in range(0, flat.numel(), 512):
        block, values = flat[start : start + 512], d[start : start + 512]
        scale = (block.max() - block.min()) / 255
        assert block.min() <= values.min() and values.max() <= block.max()
        assert bool(((values - block).abs() <= scale * 1.0001).all())  # a code's value stays in its bin
        assert math.isclose(values.double().sum(), block.double().sum(), rel_tol=0, abs_tol=1e-4)


@pytest.mark.parametrize("value", [0.0, 3.25, -7.0])
def test_constant_and_zero_tensors_come_back_exactly(value: float) -> None:
    x = torch.full((17, 3), value)
    for block_size in (0, 8):
        q = quantize(x, block_size)
        assert torch.equal(q.codes, torch.zeros_like(q.codes))
        assert torch.equal(dequantize(q), x)


def test_single_element_and_empty_tensors() -> None:
    x = torch.tensor([[-0.125]])
    q = quantize(x, 4)
    assert q.codes.shape == (1, 1) and torch.equal(dequantize(q), x)
    empty = quantize(torch.zeros(0, 4))
    assert empty.table.shape == (0, 256) and dequantize(empty).shape == (0, 4)


def test_scaling_the_input_leaves_codes_unchanged_but_scales_the_values() -> None:
    """Why replay compares dequantized values: codes alone cannot tell a tensor from ten times it."""
    x = _gaussian(2048, seed=4)
    q, q10 = quantize(x, 512), quantize(x * 10, 512)
    assert torch.equal(q.codes, q10.codes)
    assert torch.allclose(dequantize(q10), dequantize(q) * 10, rtol=1e-5, atol=1e-6)
    assert relative_l2({"x": dequantize(q10)}, {"x": x}) > 8


def test_non_contiguous_and_other_dtypes_quantize_like_their_contiguous_float32_copy() -> None:
    x = _gaussian(48, 40, seed=5).t()
    assert not x.is_contiguous()
    q, reference = quantize(x, 100), quantize(x.contiguous(), 100)
    assert torch.equal(q.codes, reference.codes) and torch.equal(q.table, reference.table)
    assert torch.equal(dequantize(q), dequantize(reference)) and dequantize(q).shape == x.shape
    doubled = quantize(x.double(), 100)
    assert torch.equal(doubled.codes, reference.codes) and torch.equal(doubled.table, reference.table)


def test_quantization_is_deterministic() -> None:
    x = _gaussian(10_000, seed=6)
    a, b = quantize(x, 1000), quantize(x.clone(), 1000)
    assert torch.equal(a.codes, b.codes) and torch.equal(a.table, b.table)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_values_are_refused(bad: float) -> None:
    x = torch.zeros(10)
    x[3] = bad
    with pytest.raises(ValueError, match="non-finite"):
        quantize(x)


def test_a_range_float32_cannot_hold_is_refused() -> None:
    with pytest.raises(ValueError, match="overflows"):
        quantize(torch.tensor([-3e38, 3e38]))


# The file.


def test_an_int8_file_round_trips(pseudo_gradient: dict[str, torch.Tensor]) -> None:
    data = encode_update(pseudo_gradient, META)
    assert encode_update(pseudo_gradient, META) == data  # the work key is a function of the content
    update = read_update(data, SHAPES, codec="int8", block_size=256)
    assert update.meta == META and not update.raw
    values = update.dequantized()
    assert set(values) == set(SHAPES) and all(values[k].shape == SHAPES[k] for k in SHAPES)
    assert relative_l2(values, pseudo_gradient) < 0.01
    for name, q in update.quantized.items():
        expected = quantize(pseudo_gradient[name], 256)
        assert torch.equal(q.codes, expected.codes) and torch.equal(q.table, expected.table)


def test_an_fp32_file_round_trips_exactly(pseudo_gradient: dict[str, torch.Tensor]) -> None:
    meta = UpdateMeta(**{**META.to_json(), "codec": "fp32", "block_size": 0})
    update = read_update(encode_update(pseudo_gradient, meta), SHAPES, codec="fp32", block_size=0)
    assert update.meta == meta and not update.quantized
    assert all(torch.equal(update.dequantized()[k], pseudo_gradient[k]) for k in SHAPES)


def test_meta_normalizes_losses_and_refuses_bad_fields() -> None:
    assert UpdateMeta(**{**META.to_json(), "losses": [5, 4.5]}).losses == (5.0, 4.5)
    for field, value in [
        ("node", "0x1234"),
        ("spec_sha256", "22" * 31),
        ("codec", "int4"),
        ("block_size", -1),
        ("pool_id", True),
        ("losses", ["5"]),
    ]:
        with pytest.raises(UpdateFileError) as err:
            UpdateMeta(**{**META.to_json(), field: value})
        assert err.value.reason == "bad_metadata", field


def test_a_pseudo_gradient_with_nan_is_not_written(pseudo_gradient: dict[str, torch.Tensor]) -> None:
    pseudo_gradient["model.norm.weight"][0] = float("nan")
    with pytest.raises(UpdateFileError) as err:
        encode_update(pseudo_gradient, META)
    assert err.value.reason == "values_not_finite"


def _file(tensors: dict[str, torch.Tensor], meta: dict | str | None) -> bytes:
    metadata = None if meta is None else {"proofpool": meta if isinstance(meta, str) else json.dumps(meta)}
    return save(tensors, metadata=metadata)


def _honest_tensors(pseudo_gradient: dict[str, torch.Tensor], block_size: int = 256) -> dict[str, torch.Tensor]:
    tensors = {}
    for name, value in pseudo_gradient.items():
        q = quantize(value, block_size)
        tensors[f"{name}::codes"], tensors[f"{name}::table"] = q.codes, q.table
    return tensors


def _replace(name: str, value: torch.Tensor) -> Callable[[dict[str, torch.Tensor]], None]:
    return lambda t: t.__setitem__(name, value)


NORM = "model.norm.weight"


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (lambda t: t.pop(f"{NORM}::table"), "wrong_tensors"),
        (lambda t: [t.pop(f"{NORM}::table"), t.pop(f"{NORM}::codes")], "wrong_tensors"),
        (_replace("extra.weight::codes", torch.zeros(2, dtype=torch.uint8)), "wrong_tensors"),
        (_replace(f"{NORM}::fp32", torch.zeros(32)), "wrong_tensors"),
        (_replace("no_suffix", torch.zeros(2)), "wrong_tensors"),
        (_replace(f"{NORM}::codes", torch.zeros(33, dtype=torch.uint8)), "wrong_shape"),
        (_replace(f"{NORM}::codes", torch.zeros(32, dtype=torch.int16)), "wrong_dtype"),
        (_replace(f"{NORM}::table", torch.zeros(1, 256, dtype=torch.float16)), "wrong_dtype"),
        (_replace(f"{NORM}::table", torch.zeros(2, 256)), "wrong_shape"),
        (_replace(f"{NORM}::table", torch.zeros(1, 255)), "wrong_shape"),
        (_replace("model.embed.weight::table", torch.zeros(7, 256)), "wrong_shape"),
        (_replace(f"{NORM}::table", torch.tensor([[float("nan")] * 256])), "table_not_finite"),
        (_replace(f"{NORM}::table", torch.tensor([[0.0] * 255 + [float("inf")]])), "table_not_finite"),
    ],
)
def test_tampered_tensors_are_refused_with_their_reason(
    pseudo_gradient: dict[str, torch.Tensor], tamper: Callable[[dict[str, torch.Tensor]], object], reason: str
) -> None:
    tensors = _honest_tensors(pseudo_gradient)
    tamper(tensors)
    with pytest.raises(UpdateFileError) as err:
        read_update(_file(tensors, META.to_json()), SHAPES)
    assert err.value.reason == reason, err.value


def test_without_shapes_names_and_shapes_are_whatever_the_file_says(pseudo_gradient: dict[str, torch.Tensor]) -> None:
    tensors = _honest_tensors(pseudo_gradient)
    tensors["extra.weight::codes"] = torch.zeros(2, dtype=torch.uint8)
    tensors["extra.weight::table"] = torch.zeros(1, 256)
    assert set(read_update(_file(tensors, META.to_json())).quantized) == {*SHAPES, "extra.weight"}
    tensors["extra.weight::table"] = torch.zeros(2, 256)  # 2 elements are one block of 256
    with pytest.raises(UpdateFileError) as err:
        read_update(_file(tensors, META.to_json()))
    assert err.value.reason == "wrong_shape"


def test_fp32_files_with_non_finite_values_are_refused(pseudo_gradient: dict[str, torch.Tensor]) -> None:
    meta = {**META.to_json(), "codec": "fp32", "block_size": 0}
    tensors = {f"{k}::fp32": v.clone() for k, v in pseudo_gradient.items()}
    tensors[f"{NORM}::fp32"][1] = float("inf")
    with pytest.raises(UpdateFileError) as err:
        read_update(_file(tensors, meta), SHAPES)
    assert err.value.reason == "values_not_finite"
    tensors[f"{NORM}::fp32"] = torch.zeros(32, dtype=torch.float64)
    with pytest.raises(UpdateFileError) as err:
        read_update(_file(tensors, meta), SHAPES)
    assert err.value.reason == "wrong_dtype"


@pytest.mark.parametrize(
    ("meta", "reason"),
    [
        (None, "bad_metadata"),
        ("{not json", "bad_metadata"),
        ("[1, 2]", "bad_metadata"),
        ({**META.to_json(), "schema_version": 2}, "wrong_schema_version"),
        ({**META.to_json(), "schema_version": "1"}, "bad_metadata"),
        ({k: v for k, v in META.to_json().items() if k != "spec_sha256"}, "bad_metadata"),
        ({**META.to_json(), "extra": 1}, "bad_metadata"),
        ({**META.to_json(), "node": "0xnot-an-address"}, "bad_metadata"),
        ({**META.to_json(), "round": -1}, "bad_metadata"),
        ({**META.to_json(), "losses": "5.5"}, "bad_metadata"),
        ({**META.to_json(), "block_size": 128}, "wrong_shape"),  # the tables are of blocks of 256
    ],
)
def test_bad_metadata_is_refused_with_its_reason(
    pseudo_gradient: dict[str, torch.Tensor], meta: dict | str | None, reason: str
) -> None:
    with pytest.raises(UpdateFileError) as err:
        read_update(_file(_honest_tensors(pseudo_gradient), meta), SHAPES)
    assert err.value.reason == reason, err.value


def test_non_finite_losses_are_read_for_the_validator_to_judge(pseudo_gradient: dict[str, torch.Tensor]) -> None:
    meta = json.dumps(META.to_json()).replace("5.25", "NaN")
    update = read_update(_file(_honest_tensors(pseudo_gradient), meta), SHAPES)
    assert math.isnan(update.meta.losses[1])


@pytest.mark.parametrize(("codec", "block_size"), [("fp32", None), (None, 4096), ("int8", 0)])
def test_a_codec_other_than_the_pools_is_refused(
    pseudo_gradient: dict[str, torch.Tensor], codec: str | None, block_size: int | None
) -> None:
    with pytest.raises(UpdateFileError) as err:
        read_update(encode_update(pseudo_gradient, META), SHAPES, codec=codec, block_size=block_size)
    assert err.value.reason == "wrong_codec"


def _honest_small() -> bytes:
    return _file({"a::codes": torch.zeros(3, dtype=torch.uint8), "a::table": torch.zeros(1, 256)}, META.to_json())


def _edited_header(old: bytes, new: bytes) -> bytes:
    """The small honest file with its header edited (and its length prefix updated)."""
    honest = _honest_small()
    size = int.from_bytes(honest[:8], "little")
    header = honest[8 : 8 + size].replace(old, new)
    assert old in honest[8 : 8 + size]
    return len(header).to_bytes(8, "little") + header + honest[8 + size :]


def _garbage() -> list[bytes]:
    honest = _honest_small()
    size = int.from_bytes(honest[:8], "little")
    return [
        b"",
        b"\x00" * 7,
        b"garbage bytes that are not a file",
        (2**63).to_bytes(8, "little") + b"{}",
        (200 * 1024 * 1024).to_bytes(8, "little") + b"{}" * 100,
        (10).to_bytes(8, "little") + b"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6",
        (2).to_bytes(8, "little") + b"[]",
        (1).to_bytes(8, "little") + b"1",
        (50_000).to_bytes(8, "little") + b"[" * 50_000,
        honest[:-1],
        honest[: 8 + size + 100],
        honest + b"\x00",
        _edited_header(b'"data_offsets":[1024,1027]', b'"data_offsets":[1024,1028]'),
        _edited_header(b'"data_offsets":[1024,1027]', b'"data_offsets":[1024]'),
        _edited_header(b'"shape":[3]', b'"shape":[-3]'),
        _edited_header(b'"shape":[3]', b'"shape":"3"'),
        _edited_header(b'"shape":[3]', b'"shape":[4]'),
        _edited_header(b'"__metadata__":{"proofpool":', b'"__metadata__":{"x":1,"proofpool":'),
    ]


@pytest.mark.parametrize("data", _garbage(), ids=lambda d: repr(d[:12]))
def test_garbage_and_truncated_bytes_are_not_safetensors(data: bytes) -> None:
    with pytest.raises(UpdateFileError) as err:
        read_update(data)
    assert err.value.reason == "not_safetensors", err.value


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        (b'"U8"', b'"U9"', "wrong_dtype"),
        (b'"U8"', b'"I8"', "wrong_dtype"),
        (b'"shape":[3]', b'"shape":[99999999999999999999999]', "wrong_shape"),
        (b'"shape":[1,256]', b'"shape":[256,1]', "wrong_shape"),
        (b'"proofpool":"{', b'"proofpool":"[1,{', "bad_metadata"),
    ],
)
def test_a_well_formed_header_describing_the_wrong_tensors_gives_their_reason(
    old: bytes, new: bytes, reason: str
) -> None:
    with pytest.raises(UpdateFileError) as err:
        read_update(_edited_header(old, new))
    assert err.value.reason == reason, err.value


def test_truncated_honest_file_is_not_safetensors(pseudo_gradient: dict[str, torch.Tensor]) -> None:
    data = encode_update(pseudo_gradient, META)
    for cut in (4, 8, 100, len(data) // 2, len(data) - 1):
        with pytest.raises(UpdateFileError) as err:
            read_update(data[:cut], SHAPES)
        assert err.value.reason == "not_safetensors"


# Comparison with a replay.


def test_an_honest_file_is_bitwise_equal_to_its_replay(pseudo_gradient: dict[str, torch.Tensor]) -> None:
    update = read_update(encode_update(pseudo_gradient, META), SHAPES)
    result = compare_update(update, pseudo_gradient, tolerance=0.05)
    assert result.bitwise and result.within and 0 < result.relative_l2 < 0.01
    assert result.replay_sha256 == tensors_sha256(pseudo_gradient)


def test_a_replay_that_drifted_slightly_is_within_the_tolerance(pseudo_gradient: dict[str, torch.Tensor]) -> None:
    update = read_update(encode_update(pseudo_gradient, META), SHAPES)
    drifted = {k: v * (1 + 1e-4 * _gaussian(*v.shape, seed=9)) for k, v in pseudo_gradient.items()}
    result = compare_update(update, drifted, tolerance=0.05)
    assert not result.bitwise and result.within and result.relative_l2 < 0.02


def test_a_scaled_file_keeps_its_codes_but_is_a_mismatch(pseudo_gradient: dict[str, torch.Tensor]) -> None:
    update = read_update(encode_update({k: v * 10 for k, v in pseudo_gradient.items()}, META), SHAPES)
    honest = read_update(encode_update(pseudo_gradient, META), SHAPES)
    assert all(torch.equal(update.quantized[k].codes, honest.quantized[k].codes) for k in SHAPES)
    result = compare_update(update, pseudo_gradient, tolerance=0.05)
    assert not result.bitwise and not result.within and result.relative_l2 > 8


def test_fp32_files_compare_exactly_or_by_distance(pseudo_gradient: dict[str, torch.Tensor]) -> None:
    meta = UpdateMeta(**{**META.to_json(), "codec": "fp32", "block_size": 0})
    update = read_update(encode_update(pseudo_gradient, meta), SHAPES)
    same = compare_update(update, pseudo_gradient, tolerance=0.05)
    assert same.bitwise and same.relative_l2 == 0.0 and same.within
    other = compare_update(update, {k: -v for k, v in pseudo_gradient.items()}, tolerance=0.05)
    assert not other.bitwise and not other.within and other.relative_l2 == pytest.approx(2.0)


def test_relative_l2_edge_cases() -> None:
    zero = {"a": torch.zeros(3)}
    assert relative_l2(zero, zero) == 0.0
    assert relative_l2({"a": torch.ones(3)}, zero) == math.inf
    assert relative_l2({"a": torch.tensor([3.0, 4.0])}, {"a": torch.tensor([0.0, 0.0]) + 1}) == pytest.approx(
        math.sqrt(4 + 9) / math.sqrt(2)
    )
    with pytest.raises(ValueError):
        relative_l2({"a": torch.ones(1)}, {"b": torch.ones(1)})


def test_tensors_sha256_covers_names_shapes_and_values() -> None:
    t = {"b": torch.arange(6.0).reshape(2, 3), "a": torch.ones(2)}
    digest = tensors_sha256(t)
    assert digest == tensors_sha256({"a": torch.ones(2), "b": torch.arange(6.0).reshape(2, 3)})
    assert digest == tensors_sha256({"a": torch.ones(2, dtype=torch.float64), "b": torch.arange(6.0).reshape(2, 3)})
    assert digest != tensors_sha256({"a": torch.ones(2), "b": torch.arange(6.0).reshape(3, 2)})
    assert digest != tensors_sha256({"c": torch.ones(2), "b": torch.arange(6.0).reshape(2, 3)})
    assert digest != tensors_sha256({"a": torch.ones(2), "b": torch.arange(6.0).reshape(2, 3) + 1e-6})


def test_relative_l2_refuses_tensors_of_other_shapes() -> None:
    with pytest.raises(ValueError, match="shapes"):
        relative_l2({"a": torch.ones(3)}, {"a": torch.ones(1)})


def test_losses_beyond_float_are_bad_metadata(pseudo_gradient: dict[str, torch.Tensor]) -> None:
    meta = json.dumps(META.to_json()).replace("5.25", "1" + "0" * 400)
    with pytest.raises(UpdateFileError) as err:
        read_update(_file(_honest_tensors(pseudo_gradient), meta), SHAPES)
    assert err.value.reason == "bad_metadata"
    assert read_update(bytearray(encode_update(pseudo_gradient, META)), SHAPES).meta == META


def test_mutated_files_give_a_reason_or_a_file_never_another_exception(
    pseudo_gradient: dict[str, torch.Tensor],
) -> None:
    rng = random.Random(7)
    honest = encode_update(pseudo_gradient, META)
    header_end = 8 + int.from_bytes(honest[:8], "little")
    reasons = set()
    for _ in range(400):
        data = bytearray(honest)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(header_end)
            if rng.random() < 0.7:
                data[at] = rng.randrange(256)
            else:
                del data[at : at + rng.randint(1, 4)]
        try:
            read_update(bytes(data), SHAPES)
        except UpdateFileError as exc:
            reasons.add(exc.reason)
    assert "not_safetensors" in reasons and len(reasons) >= 3


def test_a_replay_that_diverged_is_a_mismatch_not_a_crash(pseudo_gradient: dict[str, torch.Tensor]) -> None:
    update = read_update(encode_update(pseudo_gradient, META), SHAPES)
    diverged = {k: v.clone() for k, v in pseudo_gradient.items()}
    diverged[NORM][0] = float("nan")
    result = compare_update(update, diverged, tolerance=0.05)
    assert not result.bitwise and not result.within
