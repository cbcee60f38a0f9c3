"""The GPT model, written once against the backend contract."""

from microgpt.model.gpt import GPT, NonFiniteLoss, param_specs

__all__ = ["GPT", "NonFiniteLoss", "param_specs"]
