"""Judge calibration: agreement metrics (accuracy, Brier, ECE, AUC), Platt and isotonic maps, a decision threshold.

A calibration map turns a judge's raw score (reward logit, parsed grade) into P(label = 1). Maps are fitted with
numpy only and round-trip through plain dicts (`state_dict` / `from_state`) so they live in checkpoints.
"""
from __future__ import annotations

import numpy as np


def _check(probs, labels) -> tuple[np.ndarray, np.ndarray]:
    probs, labels = np.asarray(probs, np.float64), np.asarray(labels, np.float64)
    if probs.ndim != 1 or probs.shape != labels.shape:
        raise ValueError(f"probs {probs.shape} and labels {labels.shape} must be equal-length 1-D arrays")
    if not np.isin(labels, (0.0, 1.0)).all():
        raise ValueError("labels must be 0 or 1")
    if not np.isfinite(probs).all():
        raise ValueError("probs contain NaN or inf; score failed items 0 before measuring")
    return probs, labels


def brier(probs, labels) -> float:
    probs, labels = _check(probs, labels)
    return float(np.mean((probs - labels) ** 2))


def ece(probs, labels, n_bins: int = 10) -> float:
    """Expected calibration error over `n_bins` equal-width bins of [0, 1]: sum_b (n_b / N) |mean p - mean y|."""
    probs, labels = _check(probs, labels)
    bins = np.clip((probs * n_bins).astype(np.int64), 0, n_bins - 1)  # (N,), p = 1 falls in the last bin
    count = np.bincount(bins, minlength=n_bins)
    gap = np.abs(np.bincount(bins, probs, n_bins) - np.bincount(bins, labels, n_bins))
    return float(gap.sum() / max(count.sum(), 1))


def auc(scores, labels) -> float:
    """ROC AUC by the Mann-Whitney rank statistic, ties counted half; NaN when one class is absent."""
    scores, labels = _check(scores, labels)
    pos, neg = int(labels.sum()), int((1 - labels).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    # Average rank within each run of tied scores.
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], len(scores)]
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return float((ranks[labels == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


def accuracy(probs, labels, threshold: float = 0.5) -> float:
    probs, labels = _check(probs, labels)
    return float(np.mean((probs >= threshold) == (labels == 1)))


def agreement(probs, labels, threshold: float = 0.5, n_bins: int = 10) -> dict[str, float]:
    """Accuracy at `threshold`, Brier score, ECE and AUC of probabilities against 0/1 labels."""
    return {"accuracy": accuracy(probs, labels, threshold), "brier": brier(probs, labels),
            "ece": ece(probs, labels, n_bins), "auc": auc(probs, labels), "n": int(np.size(labels))}


def fit_threshold(probs, labels) -> float:
    """The cut t (predict 1 when p >= t) of highest accuracy on the labelled set, O(N log N). Every t in
    (p_(k-1), p_(k)] gives the same predictions; of the best intervals, the t nearest 0.5 is returned."""
    probs, labels = _check(probs, labels)
    order = np.argsort(probs, kind="stable")
    ps, below = probs[order], np.r_[0.0, np.cumsum(labels[order])]  # below[k]: positives among the k lowest
    n = len(ps)
    ks = np.r_[0, np.flatnonzero(ps[1:] != ps[:-1]) + 1, n]  # cut k: the sorted items k.. are predicted 1
    acc = (labels.sum() - below[ks] + ks - below[ks]) / max(n, 1)  # (TP + TN) / N
    lo = np.where(ks > 0, ps[np.maximum(ks - 1, 0)], -np.inf)
    hi = np.where(ks < n, ps[np.minimum(ks, n - 1)], np.inf)
    t = np.clip(0.5, np.nextafter(lo, np.inf), hi)  # (K,) the point of (lo, hi] nearest 0.5
    best = np.flatnonzero(acc >= acc.max() - 1e-12)
    return float(t[best[np.argmin(np.abs(t[best] - 0.5))]])


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-np.clip(z, -60.0, 60.0)))


class PlattScaling:
    """p = sigmoid(a * raw + b), fitted by Newton's method on the log loss with Platt's smoothed targets
    (N+ + 1) / (N+ + 2) and 1 / (N- + 2), which keeps a separable set from driving a to infinity."""

    name = "platt"

    def __init__(self, a: float = 1.0, b: float = 0.0):
        self.a, self.b = float(a), float(b)

    def fit(self, raw, labels, max_iter: int = 100) -> PlattScaling:
        x, y = _check(raw, labels)
        pos, neg = y.sum(), len(y) - y.sum()
        t = np.where(y == 1, (pos + 1) / (pos + 2), 1 / (neg + 2))
        w = np.array([0.0, np.log((neg + 1) / (pos + 1))])  # (a, b): start from the prior

        def loss(w):
            z = w[0] * x + w[1]
            return float(np.sum(np.logaddexp(0, z) - t * z))

        for _ in range(max_iter):
            p = _sigmoid(w[0] * x + w[1])
            g = np.array([np.sum((p - t) * x), np.sum(p - t)])
            h = p * (1 - p)
            H = np.array([[np.sum(h * x * x), np.sum(h * x)], [np.sum(h * x), np.sum(h)]]) + 1e-12 * np.eye(2)
            step = np.linalg.solve(H, g)
            scale, before = 1.0, loss(w)
            while loss(w - scale * step) > before + 1e-12 and scale > 1e-8:  # backtracking keeps Newton monotone
                scale /= 2
            w = w - scale * step
            if np.max(np.abs(scale * step)) < 1e-10:
                break
        self.a, self.b = float(w[0]), float(w[1])
        return self

    def __call__(self, raw) -> np.ndarray:
        return _sigmoid(self.a * np.asarray(raw, np.float64) + self.b)

    def state_dict(self) -> dict:
        return {"name": self.name, "a": self.a, "b": self.b}

    @classmethod
    def from_state(cls, state: dict) -> PlattScaling:
        return cls(state["a"], state["b"])


class IsotonicCalibration:
    """The non-decreasing step map of least squared error (pool adjacent violators), linear between fitted
    points and flat beyond them; stored as block end points (x, y)."""

    name = "isotonic"

    def __init__(self, x=(), y=()):
        self.x, self.y = np.asarray(x, np.float64), np.asarray(y, np.float64)

    def fit(self, raw, labels) -> IsotonicCalibration:
        x, y = _check(raw, labels)
        if x.size == 0:
            raise ValueError("isotonic calibration needs at least one labelled item")
        ux, inverse = np.unique(x, return_inverse=True)
        weight = np.bincount(inverse).astype(np.float64)
        value = np.bincount(inverse, y) / weight
        blocks = []  # [mean, weight, first unique-x index, last unique-x index]
        for i in range(len(ux)):
            blocks.append([value[i], weight[i], i, i])
            while len(blocks) > 1 and blocks[-2][0] >= blocks[-1][0]:  # merge ties too: one flat block
                (v1, w1, a, _), (v2, w2, _, b) = blocks[-2], blocks.pop()
                blocks[-1] = [(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, a, b]
        xs = np.ravel([[ux[a], ux[b]] for _, _, a, b in blocks])
        ys = np.repeat([v for v, _, _, _ in blocks], 2)
        keep = np.r_[True, np.diff(xs) > 0]  # a one-point block has a == b
        self.x, self.y = xs[keep], ys[keep]
        return self

    def __call__(self, raw) -> np.ndarray:
        if self.x.size == 0:
            raise ValueError("IsotonicCalibration used before fit")
        return np.interp(np.asarray(raw, np.float64), self.x, self.y)

    def state_dict(self) -> dict:
        return {"name": self.name, "x": self.x.tolist(), "y": self.y.tolist()}

    @classmethod
    def from_state(cls, state: dict) -> IsotonicCalibration:
        return cls(state["x"], state["y"])


CALIBRATORS = {"platt": PlattScaling, "isotonic": IsotonicCalibration}


def make_calibrator(name: str):
    if name not in CALIBRATORS:
        raise KeyError(f"unknown calibration method {name!r}; known: {sorted(CALIBRATORS)}")
    return CALIBRATORS[name]()


def calibrator_from_state(state: dict):
    if state.get("name") not in CALIBRATORS:
        raise KeyError(f"calibration state names method {state.get('name')!r}; known: {sorted(CALIBRATORS)}")
    return CALIBRATORS[state["name"]].from_state(state)
