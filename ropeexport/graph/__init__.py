"""Export stages: one ONNX graph builder per encoding family, and the helpers they share."""
