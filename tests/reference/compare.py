"""Helpers shared by the tests that compare the engine's logits with the numpy reference."""
import numpy as np


def kl_divergence(ref: np.ndarray, other: np.ndarray) -> float:
    """KL(softmax(ref) || softmax(other)) in nats, computed in float64."""
    def log_softmax(x):
        x = x.astype(np.float64) - x.max()
        return x - np.log(np.exp(x).sum())
    lp, lq = log_softmax(ref), log_softmax(other)
    return float((np.exp(lp) * (lp - lq)).sum())
