"""Drawing primitives on the unit square: soft masks, blobs, polylines, curves, blur, and image-side signs."""

from __future__ import annotations

import numpy as np


def ramp(d: np.ndarray, width: float) -> np.ndarray:
    """Soft inside-mask from a signed distance (negative inside) with an edge ``width`` wide."""
    return np.clip(0.5 - d / width, 0.0, 1.0)


def gauss(x: np.ndarray, y: np.ndarray, cx: float, cy: float, sx: float, sy: float) -> np.ndarray:
    return np.exp(-0.5 * (((x - cx) / sx) ** 2 + ((y - cy) / sy) ** 2))


def segments_distance(x: np.ndarray, y: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Distance from every pixel to a polyline given as [K, 2] points."""
    best = np.full(x.shape, np.inf)
    for (x0, y0), (x1, y1) in zip(points[:-1], points[1:], strict=True):
        dx, dy = x1 - x0, y1 - y0
        t = np.clip(((x - x0) * dx + (y - y0) * dy) / max(dx * dx + dy * dy, 1e-12), 0.0, 1.0)
        best = np.minimum(best, np.hypot(x - x0 - t * dx, y - y0 - t * dy))
    return best


def curve(p0: tuple[float, float], p1: tuple[float, float], p2: tuple[float, float], k: int = 12) -> np.ndarray:
    """Quadratic Bezier through control point p1, as a polyline."""
    t = np.linspace(0.0, 1.0, k)[:, None]
    a, b, c = np.array(p0), np.array(p1), np.array(p2)
    return (1 - t) ** 2 * a + 2 * (1 - t) * t * b + t**2 * c


def blur(img: np.ndarray, sigma: float) -> np.ndarray:
    """Separable Gaussian blur with edge padding (numpy only)."""
    radius = max(1, int(np.ceil(2.5 * sigma)))
    taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    taps /= taps.sum()
    for axis in (0, 1):
        pad = [(0, 0), (0, 0)]
        pad[axis] = (radius, radius)
        padded = np.pad(img, pad, mode="edge")
        n = img.shape[axis]
        img = sum(w * np.take(padded, np.arange(i, i + n), axis=axis) for i, w in enumerate(taps))
    return img


def signs(side: str) -> tuple[int, ...]:
    # Patient's right is the image's left (sign -1).
    return {"right": (-1,), "left": (1,), "bilateral": (-1, 1)}[side]
