"""What the model reads and writes as text and tokens: the chat prompt and processor inputs (batching), the
<think>/<report> layout it is taught and scored in (output_format), and the RL engine's input type (samples).
May import harness.constants and rewards only; the stages, the engine, the sampling and the models read it."""
