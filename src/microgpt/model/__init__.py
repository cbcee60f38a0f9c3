"""The GPT model, written once against the backend contract."""

from microgpt.model.gpt import GPT, NonFiniteLoss, param_specs, shard_count

__all__ = ["GPT", "NonFiniteLoss", "param_specs", "shard_count"]
