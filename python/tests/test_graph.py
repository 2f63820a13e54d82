"""Graphs from Python: symbolic dims, dtypes, backends, and errors as luminal.Error."""
import numpy as np
import pytest

import luminal
from conftest import run


def test_a_symbolic_dim_is_bound_per_run_without_recompiling(rng):
    g = luminal.Graph()
    x = g.tensor(("rows", 8))
    w = g.tensor((8, 3))
    y = (x @ w).relu().retrieve()
    assert x.shape == ("rows", 8) and y.shape == ("rows", 3)
    g.compile(luminal.cpu())
    wv = rng.normal(size=(8, 3)).astype(np.float32)
    w.set(wv)
    for rows in (1, 5, 2):
        g.set_dim("rows", rows)
        xv = rng.normal(size=(rows, 8)).astype(np.float32)
        x.set(xv)
        g.execute()
        np.testing.assert_allclose(y.numpy(), np.maximum(xv @ wv, 0), rtol=1e-5, atol=1e-6)


def test_the_reference_interpreter_agrees_with_numpy(rng):
    x = rng.normal(size=(4, 6)).astype(np.float32)
    got = run(lambda g, t: (t * t).sum(axis=1).sqrt(), x, backend=luminal.reference())
    np.testing.assert_allclose(got, np.sqrt((x * x).sum(1)), rtol=1e-6)


def test_integer_and_half_inputs_and_outputs(rng):
    i = rng.integers(-100, 100, (3, 5)).astype(np.int32)
    h = rng.normal(size=(3, 5)).astype(np.float16)
    got_i, got_h, got_b = run(lambda g, a, b: (a * 2, b * 2.0, b.cast(luminal.bfloat16)), i, h)
    assert got_i.dtype == np.int32 and got_h.dtype == np.float16 and got_b.dtype == np.float32
    np.testing.assert_array_equal(got_i, i * 2)
    np.testing.assert_array_equal(got_h, h * np.float16(2))
    np.testing.assert_allclose(got_b, h.astype(np.float32), rtol=1 / 128)


def test_an_array_of_the_wrong_shape_is_an_error_naming_both():
    g = luminal.Graph()
    x = g.tensor((2, "n"))
    x.exp().retrieve()
    g.set_dim("n", 3)
    with pytest.raises(luminal.Error, match=r"shape \(4, 3\) for a tensor of shape \(2, n\)"):
        x.set(np.zeros((4, 3), np.float32))


def test_setting_before_a_dim_is_bound_names_set_dim():
    g = luminal.Graph()
    x = g.tensor(("n",))
    with pytest.raises(luminal.Error, match="set_dim"):
        x.set(np.zeros(3, np.float32))


def test_setting_a_computed_tensor_is_an_error():
    g = luminal.Graph()
    y = g.tensor((3,)).exp()
    with pytest.raises(luminal.Error):
        y.set(np.zeros(3, np.float32))


def test_dims_may_be_expressions_over_names():
    g = luminal.Graph()
    x = g.tensor(("2*n", 3))
    rows = x.reshape("n", 6).sum(axis=1).retrieve()
    y = g.iota("3*z + n", ("n",), luminal.int64).retrieve()
    g.set_dim("n", 2)
    g.compile(luminal.cpu())
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    x.set(data)
    g.execute()
    np.testing.assert_allclose(rows.numpy(), data.reshape(2, 6).sum(1))
    np.testing.assert_array_equal(y.numpy(), 3 * np.arange(2) + 2)


def test_writing_an_output_into_host_memory_is_an_error():
    g = luminal.Graph()
    y = (g.tensor((2, 3)) * 2.0).retrieve()
    with pytest.raises(luminal.Error, match="write_into: the array is not in a GPU's memory"):
        y.write_into(np.zeros((2, 3), np.float32))


def test_bad_dims_and_shapes_are_errors():
    g = luminal.Graph()
    with pytest.raises(luminal.Error, match="a dim is an int, a name or an expression"):
        g.tensor((2, 1.5))
    with pytest.raises(luminal.Error, match="column"):
        g.tensor((2, "seq +"))
    x = g.tensor((2, 3))
    with pytest.raises(luminal.Error):
        x.reshape(4, 2)


def test_the_gpu_backend_without_a_gpu_raises_luminal_error():
    g = luminal.Graph()
    g.tensor((3,)).exp().retrieve()
    try:
        g.compile(luminal.cuda())
    except luminal.Error as e:
        assert str(e)  # names what is missing


def test_running_or_reading_out_of_order_is_an_error_saying_what_to_do():
    g = luminal.Graph()
    x = g.tensor((3,))
    y = x.exp().retrieve()
    z = x.sin()
    with pytest.raises(luminal.Error, match="not compiled"):
        g.execute()
    with pytest.raises(luminal.Error, match="retrieve"):
        y.numpy()
    g.compile(luminal.cpu())
    with pytest.raises(luminal.Error, match="set"):
        g.execute()  # x has no data
    x.set(np.arange(3, dtype=np.float32))
    g.execute()
    np.testing.assert_allclose(y.numpy(), np.exp(np.arange(3)), rtol=1e-6)
    with pytest.raises(luminal.Error, match="retrieve"):
        z.numpy()  # computed on the way, never kept
    with pytest.raises(luminal.Error, match="no luminal dtype"):
        x.set(np.zeros(3, np.complex64))


def test_strided_arrays_are_read_in_their_logical_order(rng):
    a = rng.normal(size=(5, 3)).astype(np.float32)
    got = run(lambda g, t: t * 1.0, np.ascontiguousarray(a.T))
    g = luminal.Graph()
    x = g.tensor((3, 5))
    y = (x * 1.0).retrieve()
    g.compile(luminal.cpu())
    x.set(a.T)  # a transposed view: copied contiguous first
    g.execute()
    np.testing.assert_array_equal(y.numpy(), got)
    np.testing.assert_array_equal(y.numpy(), a.T)


def test_strided_arrays_numpy_cannot_copy_are_read_through_their_strides(rng):
    """A transposed bf16 torch tensor (NumPy has no bf16 to make it contiguous in) and an
    array walked backwards with a step."""
    torch = pytest.importorskip("torch")
    a = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    b = rng.normal(size=9).astype(np.float32)
    g = luminal.Graph()
    x, z = g.tensor((3, 2), dtype=luminal.bfloat16), g.tensor((5,))
    y, w = (x * 2.0).retrieve(), (z + 1.0).retrieve()
    g.compile(luminal.cpu())
    x.set(a.T)
    z.set(b[::-2])
    g.execute()
    np.testing.assert_array_equal(y.numpy(), (a.T.float() * 2).numpy())
    np.testing.assert_array_equal(w.numpy(), b[::-2] + 1)


def test_equality_is_elementwise_as_in_numpy():
    a = np.array([[1.0, np.nan, 2.0, -0.0], [np.inf, 3.0, np.nan, 5.0]], np.float32)
    b = np.array([[1.0, np.nan, 7.0, 0.0], [np.inf, 4.0, 1.0, 5.0]], np.float32)
    got = run(lambda g, x, y: (x == y, x != y, x == 2.0, x != 5.0, x == float("nan"),
                               x != float("nan"), x.cast(luminal.int32) == 5), a, b)
    want = (a == b, a != b, a == 2.0, a != 5.0, a == np.nan, a != np.nan,
            np.nan_to_num(a, posinf=0).astype(np.int32) == 5)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_tensor_has_no_truth_value_and_hashes_by_identity():
    g = luminal.Graph()
    x, y = g.tensor((3,)), g.tensor((3,))
    with pytest.raises(TypeError, match="no truth value"):
        bool(x == y)
    assert {x: 1, y: 2}[x] == 1 and len({x, y, x}) == 2
