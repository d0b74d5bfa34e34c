import numpy as np
import pytest

from grader.errors import KernelArgumentError, KernelNotFoundError, KernelSourceError
from grader.signature import check_args, kernel_names, parse_signature

SOURCE = r'''
// __global__ void commented_out(int x)
#define TILE 16
extern "C" __global__ void __launch_bounds__(256) vadd(const float* __restrict__ a, const float *b,
                                                      float* c, int n) {}
extern "C" {
__global__ void mixed(double x, __half* h, unsigned int u, const __nv_bfloat16* __restrict__ w) {}
}
__global__ void mangled(float* x) {}
template <int B> __global__ void templated(float* x) {}
extern "C" __global__ void noargs() { printf("(not, a, param)"); }
'''


def is_np(x):
    return isinstance(x, np.ndarray)


def check(name, args):
    return check_args(parse_signature(SOURCE, name), args, is_array=is_np, array_kind="a NumPy array")


def test_finds_every_kernel_but_not_comments():
    assert kernel_names(SOURCE) == ["vadd", "mixed", "mangled", "templated", "noargs"]


def test_parses_qualifiers_launch_bounds_and_line():
    sig = parse_signature(SOURCE, "vadd")
    assert sig.line == 4 and sig.extern_c
    assert [(p.name, p.ctype, p.dtype, p.pointer, p.const) for p in sig.params] == [
        ("a", "float", "float32", True, True),
        ("b", "float", "float32", True, True),
        ("c", "float", "float32", True, False),
        ("n", "int", "int32", False, False),
    ]


def test_extern_c_block_and_half_types():
    sig = parse_signature(SOURCE, "mixed")
    assert sig.extern_c
    assert [p.dtype for p in sig.params] == ["float64", "float16", "uint32", "bfloat16"]
    assert parse_signature(SOURCE, "noargs").params == ()
    assert not parse_signature(SOURCE, "mangled").extern_c


def test_template_kernel_and_unknown_name_are_explained():
    with pytest.raises(KernelSourceError, match="template"):
        parse_signature(SOURCE, "templated")
    with pytest.raises(KernelNotFoundError, match="defines: vadd, mixed, mangled, templated, noargs"):
        parse_signature(SOURCE, "vector_add")


def test_valid_args_pass_through():
    a = np.zeros(4, np.float32)
    out = check("vadd", (a, a, a, np.int32(4)))
    assert out[0] is a and out[3] == 4 and out[3].dtype == np.int32


@pytest.mark.parametrize(
    "args, message",
    [
        ("python_int", "is int32, but you passed int64 (CuPy sends a Python int as int64). Wrap it: np.int32(4)"),
        ("float64_array", "expects float32 data but the array is float64"),
        ("too_few", "vadd takes 4 argument(s) but 3 were given"),
        ("scalar_for_pointer", "is a pointer, so pass a NumPy array; got builtins.float"),
        ("strided", "not C-contiguous"),
        ("array_for_scalar", "is a scalar; got an array of shape (4,)"),
        ("not_a_tuple", "args must be a tuple"),
    ],
)
def test_wrong_args_say_what_to_change(args, message):
    a = np.zeros(4, np.float32)
    cases = {
        "python_int": (a, a, a, 4),
        "float64_array": (a, a.astype(np.float64), a, np.int32(4)),
        "too_few": (a, a, a),
        "scalar_for_pointer": (a, a, 1.0, np.int32(4)),
        "strided": (a, a, np.zeros(8, np.float32)[::2], np.int32(4)),
        "array_for_scalar": (a, a, a, a),
        "not_a_tuple": a,
    }
    with pytest.raises(KernelArgumentError) as err:
        check("vadd", cases[args])
    assert message in str(err.value)


def test_python_float_is_a_double_like_cupy():
    h = np.zeros(2, np.float16)
    w = np.zeros(2, np.uint16)  # raw bf16 bits are accepted for a bf16 pointer
    out = check("mixed", (1.5, h, np.uint32(3), w))
    assert out[0].dtype == np.float64
    with pytest.raises(KernelArgumentError, match="is uint32, but you passed int64"):
        check("mixed", (1.5, h, 3, w))
