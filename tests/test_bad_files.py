"""Files nobody should trust: every one ends in one line naming the file and the problem
(exit 2), or in a correct result; never a traceback, never a read without end."""

import json
import os

import pytest


def _one_line(code, err, *words):
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize(
    "content,words",
    [
        (b"N,time\n1,10\n", ["two or more different worker counts"]),
        (b"N,time\n1," + b"1" * 200_000 + b"\n2,5\n", ["row 2", "not finite"]),
        (bytes(range(256)) * 10, ["binary"]),
        (b"N,time\n1,\xff\xfe10\n2,5\n", ["not UTF-8", "offset 9"]),
        (b"", ["no rows"]),
    ],
    ids=["one-row", "over-long-line", "binary", "latin-1", "empty"],
)
def test_fit_refuses_a_bad_file_in_one_line(cli, tmp_path, content, words):
    path = tmp_path / "m.csv"
    path.write_bytes(content)
    _one_line(*cli("fit", path)[::2], str(path), *words)


def test_fit_reads_a_field_of_128_kib_as_data(cli, tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("N,time,note\n1,10,x\n2,6," + "y" * 140_000 + "\n4,4,z\n")
    code, out, err = cli("fit", path, "--json")
    assert code == 0, err
    assert [p["n"] for p in json.loads(out)["points"]] == [1, 2, 4]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_fit_refuses_a_stream_without_end_before_reading_it(cli):
    _one_line(*cli("fit", "/dev/zero")[::2], "/dev/zero", "device or special file")


def test_fit_is_the_same_whatever_the_unit_of_time(cli, tmp_path):
    """Times of 1e-300 s or 1e300 s fit exactly as seconds do (the laws have no scale)."""
    path = tmp_path / "m.csv"
    times = [10.0, 5.6, 3.4, 2.35, 1.9]
    fits = {}
    for exponent in (0, -300, -15, 15, 300):
        rows = "".join(
            f"{n},{t}e{exponent}\n" for n, t in zip([1, 2, 4, 8, 16], times, strict=True)
        )
        path.write_text("N,time\n" + rows)
        code, out, err = cli("fit", path, "--json")
        assert code == 0 and err == "", err
        fits[exponent] = json.loads(out)["fit"]
    for exponent, fit in fits.items():
        for law, key in (("usl", "sigma"), ("usl", "kappa"), ("amdahl", "p")):
            assert fit[law][key] == pytest.approx(fits[0][law][key], rel=1e-6, abs=1e-9), (
                exponent,
                law,
                key,
            )


def _profile_file(tmp_path, mutate):
    from ceiling.hardware.profile import MachineProfile, MeasuredDevice

    device = MeasuredDevice(
        name="cpu", kind="cpu", peak_flops_per_s={"fp32": 2e11}, bandwidth_bytes_per_s=2e10
    )
    data = MachineProfile(
        method_version=2, created="2026-01-01", host="h", environment={}, devices=[device]
    ).to_json()
    path = tmp_path / "p.json"
    path.write_bytes(mutate(data))
    return path


@pytest.mark.parametrize(
    "mutate,words",
    [
        (lambda d: json.dumps({**d, "method_version": 99}).encode(), ["method 99", "up to"]),
        (lambda d: json.dumps(d).encode().replace(b'"h"', b'"\xff"'), ["not UTF-8"]),
        (lambda d: b"\x00\x01\x02" * 100, ["binary"]),
    ],
    ids=["newer-method", "not-utf8", "binary"],
)
@pytest.mark.parametrize(
    "command",
    [
        ["roofline", "--op", "add:1000"],
        ["decode", "gpt:tiny"],
        ["plan", "gpt:tiny", "--gpus", "1"],
        ["report", "--only", "amdahl"],
    ],
    ids=lambda c: c[0],
)
def test_a_profile_nobody_should_trust_is_refused_in_one_line(
    cli, tmp_path, mutate, words, command
):
    path = _profile_file(tmp_path, mutate)
    out = ["-o", tmp_path / "r.html"] if command[0] == "report" else []
    _one_line(*cli(*command, *out, "--profile", path)[::2], "p.json", *words)
    assert not (tmp_path / "r.html").exists()
