"""ONNX import: real CNNs exported by PyTorch against onnxruntime (batch 1 and a dynamic
batch), ONNX's own node test cases for every op the importer supports (the cases the onnx
package generates, which are what it ships under onnx/backend/test/data/node), refusals,
and that `import rlxpy` does not import onnx."""
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import rlxpy as rx  # noqa: E402
from rlxpy.onnx import BUILD, OnnxImportError  # noqa: E402

from cnn_models import MODELS, export  # noqa: E402


def test_import_rlxpy_does_not_import_onnx():
    code = "import sys, rlxpy; assert 'onnx' not in sys.modules and 'onnxruntime' not in sys.modules; rlxpy.onnx"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name, fold", [(name, True) for name in MODELS] + [("resnet18", False)],
                         ids=lambda v: v if isinstance(v, str) else ("exporter-folded" if v else "bn-nodes"))
def test_real_models_match_onnxruntime_at_batch_1_and_a_dynamic_batch(name, fold):
    data, _ = export(name, fold=fold)
    g = rx.onnx.load(onnx.load_from_string(data))
    exe = rx.compile(g)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    shape = MODELS[name][1]
    rng = np.random.default_rng(80)
    for n in (1, 3):
        x = rng.standard_normal((n,) + shape[1:]).astype(np.float32)
        out = exe.run({"input": x})["output"]
        ref = sess.run(None, {"input": x})[0]
        assert out.shape == ref.shape
        assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max(), (name, n)
    assert not any(type(t.record).__name__ == "BatchNorm" for t in exe.thunks)   # every one folded
    if not fold:      # the exporter left them as nodes: rlxpy folded them, and explain() says so
        names = [t.node for t in exe.thunks if t.algo != "reorder"]
        assert sum(n.count("BatchNormalization") for n in names) == 20, names
        # and each block's second conv took its batch norm, the residual add and the relu in
        assert sum(1 for n in names if "BatchNormalization+" in n and "/Add" in n and "Relu" in n) == 8, names


@pytest.mark.parametrize("name", ["unet", "audio1d"])
def test_symbolic_spatial_dims_import_as_dynamic_dims(name):
    """A model exported with its batch and every spatial dim symbolic runs at two sizes
    against onnxruntime: the UNet's skips (concat after upsampling) and the 1-D CNN's
    pooled head must follow the plane's size, not the export's."""
    import io

    import torch

    from cnn_models import randomized
    cls, shape = MODELS[name]
    torch.manual_seed(0)
    module, buf = randomized(cls(), 0), io.BytesIO()
    dims = {0: "batch", **{k: f"d{k}" for k in range(2, len(shape))}}
    torch.onnx.export(module, torch.randn(*shape), buf, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": dims}, opset_version=17, dynamo=False)
    g = rx.onnx.load(buf.getvalue())
    exe = rx.compile(g)
    assert exe.is_dynamic      # and runs at twice the export's size below, which a fixed plane would refuse
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(81)
    for n, scale in ((1, 1), (2, 2)):
        x = rng.standard_normal((n, shape[1]) + tuple(d * scale for d in shape[2:])).astype(np.float32)
        out, ref = exe.run({"input": x})["output"], sess.run(None, {"input": x})[0]
        assert out.shape == ref.shape
        assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max(), (name, x.shape)


def test_a_flip_exported_by_pytorch_imports_as_backward_slices():
    """torch.flip exports as Slice with step -1 and an end of INT64_MIN (through index 0)."""
    import io

    import torch

    class Flipped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            return self.conv(torch.flip(x, [2, 3]))[:, :, ::2].flip(1)

    torch.manual_seed(0)
    module, buf = Flipped().eval(), io.BytesIO()
    torch.onnx.export(module, torch.randn(1, 3, 9, 10), buf, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "n"}}, dynamo=False)
    model = onnx.load_from_string(buf.getvalue())
    constants = {n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t).tolist()
                 for n in model.graph.node if n.op_type == "Constant"}
    steps = [constants[n.input[4]] for n in model.graph.node if n.op_type == "Slice"]
    assert steps == [[-1, -1], [2], [-1]], steps      # what the model holds: backward slices
    exe = rx.compile(rx.onnx.load(model))
    x = np.random.default_rng(3).standard_normal((2, 3, 9, 10)).astype(np.float32)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    out = exe.run({"input": x})["output"]
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_negative_pads_crop_as_onnxruntime_does(mode):
    """ONNX Pad with negative pads (a crop) on one side and positive on the other."""
    from onnx import TensorProto, helper, numpy_helper
    pads = np.array([0, 0, -1, 2, 0, 0, 1, -2], np.int64)      # begins then ends, axes 0..3
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 5, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(pads, "pads"), numpy_helper.from_array(np.array(1.5, np.float32), "value")]
    node = helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode=mode)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 18)])
    xv = np.random.default_rng(5).standard_normal((2, 3, 5, 6)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": xv})[0]
    out = rx.compile(rx.onnx.load(model)).run({"x": xv})["y"]
    assert out.shape == want.shape == (2, 3, 5, 6)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("auto", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("size, kernel, stride, bias", [
    ((1, 1), (1, 1), (1, 2), True),       # total padding -1: one extra column, before (UPPER) or after (LOWER)
    ((1, 3), (1, 1), (1, 3), False),      # -2: one on each side
    ((2, 3), (2, 1), (3, 3), True),       # -1 and -2 on the two axes
    ((3,), (2,), (3,), True),             # 1-D
    ((1, 2, 2), (1, 1, 2), (2, 1, 3), True)])
def test_conv_transpose_same_padding_that_grows_the_output_matches_the_onnx_reference(auto, size, kernel, stride, bias):
    """auto_pad SAME asks for input * stride outputs; where that is more than the natural size
    the total padding is negative and splits by the spec's floor division (the ONNX
    reference's rows, which only the bias reaches). onnxruntime returns the natural size."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(9)
    w = rng.standard_normal((2, 3) + kernel).astype(np.float32)
    inits, inputs = [numpy_helper.from_array(w, "w")], ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b"))
        inputs.append("b")
    node = helper.make_node("ConvTranspose", inputs, ["y"], kernel_shape=list(kernel), strides=list(stride),
                            auto_pad=auto)
    model = helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2, *size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits), opset_imports=[helper.make_opsetid("", 19)])
    x = rng.standard_normal((2, 2) + size).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert want.shape[2:] == tuple(i * s for i, s in zip(size, stride))
    out = rx.compile(rx.onnx.load(model)).run({"x": x})["y"]
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_a_model_with_unknown_ops_is_refused_listing_every_one():
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("Einsum", ["a"], ["b"], name="e1", equation="ij->ji"),
             helper.make_node("LpNormalization", ["b"], ["y"], name="n1")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OnnxImportError, match=re.escape("2 node(s) rlxpy cannot import: e1 (Einsum, opset 17); "
                                                        "n1 (LpNormalization, opset 17)")):
        rx.onnx.load(model)


def test_a_model_loads_from_its_bytes_as_onnxruntime_takes_it():
    """rx.onnx.load(bytes) as InferenceSession(bytes): the same graph as from the ModelProto;
    bytes that are no model are refused by name, not as a missing opset."""
    from onnx import TensorProto, helper, numpy_helper
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("MatMul", ["x", "wt"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [numpy_helper.from_array(w.T.copy(), "wt")]),
                              opset_imports=[helper.make_opsetid("", 17)])
    xv = np.array([[1.0, -2.0, 0.5], [-1.0, 0.0, 3.0]], np.float32)
    for given in (model.SerializeToString(), bytearray(model.SerializeToString())):
        out = rx.compile(rx.onnx.load(given)).run({"x": xv})["y"]
        np.testing.assert_allclose(out, np.maximum(xv @ w.T, 0), rtol=1e-6)
    with pytest.raises(OnnxImportError, match="not a serialized ONNX model"):
        rx.onnx.load(b"\x08\x07 plainly not a model")
    with pytest.raises(OnnxImportError, match="not a serialized ONNX model"):
        rx.onnx.load(b"")
    with pytest.raises(TypeError, match="a path, an onnx.ModelProto or the model's bytes, got int"):
        rx.onnx.load(3)


def test_an_opset_outside_the_range_is_refused():
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
                              opset_imports=[helper.make_opsetid("", 9)])
    with pytest.raises(OnnxImportError, match="opset 9 of the default domain"):
        rx.onnx.load(model)


# --- ONNX's node tests ------------------------------------------------------------------------
def _node_cases():
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        every = collect_testcases(None)
    return [c for c in every if c.model.graph.node and all(n.op_type in BUILD for n in c.model.graph.node)]


NODE_CASES = _node_cases()

# inputs the importer takes as constants (an op's parameters, fed as graph inputs by the
# node tests): the test binds them as initializers with the data set's values
CONSTANT_INPUTS = {"Clip": (1, 2), "Resize": (1, 2, 3), "Pad": (1, 2, 3), "Slice": (1, 2, 3, 4), "Split": (1,),
                   "ReduceMean": (1,), "Reshape": (1,), "Upsample": (1,)}

# what rlxpy does not do, by the import error's words: such cases are xfail with the reason
UNSUPPORTED = {
    "element type": "rlxpy runs float32 only",
    "training_mode": "BatchNormalization in training mode",
    "mask output": "Dropout's mask output",
    "Indices output": "MaxPool's Indices output",
    "mode 'cubic'": "Resize: cubic mode", "mode 'linear'": "Resize: linear mode",
    "nearest upsampling of a 4-D input by 2": "Resize: only 2x nearest upsampling",
    "does not pick input pixel": "Resize: coordinate modes other than a 2x nearest upsample",
    "opset 9 ": "opset 9 (Upsample)",
    "do not add up": "Split with zero-size parts (empty tensors)",
    "allowzero": "Reshape allowzero with a 0 dim (empty tensors)",
    "mode 'wrap'": "Pad: wrap mode",
    "element type 0": "optional / sequence inputs",
    "is empty": "empty tensors (a zero-size slice)",
    "cannot be split": "Split of an axis whose size the model does not state",
}


def _bound(case, inputs):
    """The case's model with its parameter inputs as initializers; the remaining feeds."""
    from onnx import numpy_helper
    m = onnx.ModelProto()
    m.CopyFrom(case.model)
    names = [i.name for i in m.graph.input]
    const = set()
    for node in m.graph.node:
        for k in CONSTANT_INPUTS.get(node.op_type, ()):
            if k < len(node.input) and node.input[k] in names:
                const.add(node.input[k])
    feed = {}
    keep = []
    for vi, value in zip(list(m.graph.input), inputs):
        if vi.name in const:
            m.graph.initializer.append(numpy_helper.from_array(np.asarray(value), vi.name))
        else:
            keep.append(vi)
            feed[vi.name] = value
    del m.graph.input[:]
    m.graph.input.extend(keep)
    return m, feed


@pytest.mark.parametrize("case", NODE_CASES, ids=lambda c: c.name)
def test_onnx_node_case(case):
    for inputs, outputs in case.data_sets:
        model, feed = _bound(case, inputs)
        try:
            exe = rx.compile(rx.onnx.load(model))
        except (OnnxImportError, ValueError) as e:
            reason = next((why for words, why in UNSUPPORTED.items() if words in str(e)), None)
            if reason is None:
                raise
            pytest.xfail(f"{reason}: {e}")
        out = exe.run({k: np.asarray(v) for k, v in feed.items()})
        for vi, want in zip(model.graph.output, outputs):
            np.testing.assert_allclose(out[vi.name], want, rtol=1e-3, atol=1e-7, err_msg=case.name)


def test_command_line_runs_a_model_with_given_and_random_inputs(tmp_path):
    data, module = export("audio1d")
    path = tmp_path / "audio.onnx"
    path.write_bytes(data)
    x = np.random.default_rng(81).standard_normal((2, 1, 4000)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    done = subprocess.run([sys.executable, "-m", "rlxpy", "run", str(path), "--input", f"input={tmp_path / 'x.npy'}",
                           "--runs", "2"], capture_output=True, text=True, check=True)
    assert "output 'output': shape [2, 10]" in done.stdout
    assert "median latency over 2 runs" in done.stdout and "conv" in done.stdout.lower()
    done = subprocess.run([sys.executable, "-m", "rlxpy", "run", str(path), "--batch", "3", "--runs", "1"],
                          capture_output=True, text=True, check=True)
    assert "output 'output': shape [3, 10]" in done.stdout and "input [3, 1, 4000]" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "rlxpy", "run", str(path), "--input", "nope=x.npy"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "NAME one of ['input']" in bad.stderr
