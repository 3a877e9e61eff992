"""Samples for the complex-number and FFT ops, in the oracle's real-valued terms: complex values
are built from real sample tensors (``complex``, ``polar``, ``view_as_complex``) and compared as
``view_as_real`` pairs, so values, gradients, float64 gradcheck and meta all apply."""

from __future__ import annotations

from tests.ops.opinfo import Sample, T


def _pairs(lib, z):
    return lib.view_as_real(z)


def _complex(lib, a, b):
    return lib.complex(a, b)


def _matmul_complex(lib, z, w):
    return z @ w.to(z.dtype)


SAMPLES = [
    Sample(
        "complex",
        args=(T((3, 4)), T((3, 4))),
        fn=lambda lib, a, b: _pairs(lib, _complex(lib, a, b)),
    ),
    Sample(
        "complex",
        args=(T((3, 1)), T((4,))),
        fn=lambda lib, a, b: _pairs(lib, _complex(lib, a, b)),
        id="complex-broadcast",
    ),
    Sample(
        "polar",
        args=(T((3, 4), low=0.1), T((3, 4), low=-3.0, high=3.0)),
        fn=lambda lib, r, theta: _pairs(lib, lib.polar(r, theta)),
    ),
    Sample(
        "view_as_real",
        args=(T((3, 4)), T((3, 4))),
        fn=lambda lib, a, b: _pairs(lib, _complex(lib, a, b)),
    ),
    Sample(
        "view_as_complex",
        args=(T((3, 4, 2)),),
        fn=lambda lib, x: lib.view_as_complex(x).abs(),
        ops=("view_as_complex", "abs"),
    ),
    Sample(
        "angle",
        args=(T((3, 4)), T((3, 4))),
        fn=lambda lib, a, b: _complex(lib, a, b).angle(),
    ),
    Sample("angle", args=(T((4,), values=[-2.0, -0.5, 1.0, 3.0]),), id="angle-real"),
    Sample(
        "sgn",
        args=(T((3, 4)), T((3, 4))),
        fn=lambda lib, a, b: _pairs(lib, _complex(lib, a, b).sgn()),
    ),
    Sample(
        "conj_physical",
        args=(T((3, 4)), T((3, 4))),
        fn=lambda lib, a, b: _pairs(lib, lib.conj_physical(_complex(lib, a, b)) * (1 + 2j)),
    ),
    Sample(
        "abs",
        args=(T((3, 4)), T((3, 4))),
        fn=lambda lib, a, b: _complex(lib, a, b).abs(),
        id="abs-complex",
    ),
    Sample(
        "mul",
        args=(T((3, 4)), T((3, 4)), T((3, 4))),
        fn=lambda lib, a, b, w: _pairs(lib, _complex(lib, a, b) * _complex(lib, w, a) / (2 - 1j)),
        ops=("mul", "div"),
        id="mul-div-complex",
    ),
    Sample(
        "matmul",
        args=(T((3, 4)), T((3, 4)), T((4, 2))),
        fn=lambda lib, a, b, w: _pairs(lib, _matmul_complex(lib, _complex(lib, a, b), w)),
        id="matmul-complex",
    ),
    Sample(
        "exp",
        args=(T((3, 4)), T((3, 4))),
        fn=lambda lib, a, b: _pairs(lib, _complex(lib, a, b).exp().log1p().sqrt()),
        ops=("exp", "log1p", "sqrt"),
        id="exp-log1p-sqrt-complex",
    ),
    Sample(
        "var",
        args=(T((3, 4)), T((3, 4))),
        fn=lambda lib, a, b: (_complex(lib, a, b).var(1), _complex(lib, a, b).std()),
        ops=("var", "std"),
        id="var-std-complex",
    ),
    Sample(
        "linalg_vector_norm",
        args=(T((3, 4)), T((3, 4))),
        fn=lambda lib, a, b: (
            lib.linalg.vector_norm(_complex(lib, a, b), 2, 1),
            lib.linalg.vector_norm(_complex(lib, a, b), 3),
        ),
        id="vector_norm-complex",
    ),
    Sample(
        "_fft_r2c",
        args=(T((3, 8)),),
        fn=lambda lib, x: (_pairs(lib, lib.fft.rfft(x)), _pairs(lib, lib.fft.fft(x, norm="ortho"))),
        id="rfft-fft",
    ),
    Sample(
        "_fft_c2c",
        args=(T((3, 6)), T((3, 6))),
        fn=lambda lib, a, b: _pairs(lib, lib.fft.ifft2(_complex(lib, a, b), s=(4, 5))),
        id="ifft2",
    ),
    Sample(
        "_fft_c2r",
        args=(T((3, 5)), T((3, 5))),
        fn=lambda lib, a, b: (
            lib.fft.irfft(_complex(lib, a, b)),
            lib.fft.irfft(_complex(lib, a, b), n=7, norm="forward"),
        ),
        id="irfft",
    ),
    Sample(
        "_fft_c2r",
        args=(T((4, 5)), T((4, 5))),
        fn=lambda lib, a, b: lib.fft.hfftn(_complex(lib, a, b), s=(3, 6)),
        id="hfftn",
    ),
]
