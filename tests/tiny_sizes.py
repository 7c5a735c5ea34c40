"""The tiny model and data sizes of the end-to-end tests, as dotted config overrides (seconds per stage)."""

TINY = [
    "model.tiny_text_hidden=32", "model.tiny_text_layers=1", "model.tiny_vision_hidden=16",
    "model.tiny_vision_depth=1", "model.tiny_vocab_size=400", "model.image_size=56",
    "data.synth_n=40", "data.synth_image_size=64", "data.max_val=6", "data.max_test=6",
    "pretrain.n=40", "pretrain.epochs=1", "pretrain.batch_size=8",
    "prompt.max_report_tokens=24", "generation.max_new_tokens=12", "generation.batch_size=8",
]
