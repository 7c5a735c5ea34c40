"""Model builders: the tiny/real presets, the per-stage trainable sets and the frozen disease classifier."""
