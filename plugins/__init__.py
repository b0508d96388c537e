"""Runtime plugins: the Triton RoPE kernel (``triton_rope``) and its TensorRT registration (``trt_plugin``)."""
