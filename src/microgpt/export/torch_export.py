"""`microgpt export DIR --format torch` and `microgpt.export.to_torch(DIR)`: the plan as an ExportedModel
(torch_module.py) holding the checkpoint's weights, its logits held within 1e-5 of microgpt's on a probe batch
before it is returned or written.

model.pt is one `torch.save` of a dict (format, version, plan, info, state_dict) that
`torch.load(path, weights_only=True)` reads; `microgpt.export.torch_module.load(path)` rebuilds the module.
"""

from __future__ import annotations

import numpy as np

from microgpt.export.export_plan import ExportError
from microgpt.export.needs import need
from microgpt.export.source import Source

# float32 on both sides, the same operations summed in other orders (matmul blocking, softmax and LayerNorm
# reductions): measured below 6e-6 on every family at logits up to 7; the bound grows with the logits' size
PROBE_TOLERANCE = 1e-5


def build_torch(source: Source):
    """The ExportedModel of a Source, its weights loaded (float32, cpu, eval mode)."""
    torch = need("torch")
    from microgpt.export.torch_module import ExportedModel

    info = {"family": source.family_name, "describe": source.describe, "tokenizer": source.tokenizer_json,
            "source": str(source.path)}
    model = ExportedModel(source.plan, info)
    state = {model.paths[name]: torch.from_numpy(np.array(array, dtype=np.float32))
             for name, array in source.weights.items()}
    model.load_state_dict(state)
    return model.eval()


def verify(model, expected: np.ndarray, ids: np.ndarray) -> None:
    """ExportError unless the module's logits of `ids` are within PROBE_TOLERANCE of microgpt's `expected`."""
    torch = need("torch")
    with torch.no_grad():
        got = model(torch.from_numpy(ids)).numpy()
    worst, bound = float(np.max(np.abs(got - expected))), PROBE_TOLERANCE * max(1.0, float(np.max(np.abs(expected))))
    if not worst <= bound:
        raise ExportError(f"the torch module's logits differ from microgpt's by {worst:.3g} (over "
                          f"{bound:.3g}); nothing was written (a microgpt bug: please report it)")
