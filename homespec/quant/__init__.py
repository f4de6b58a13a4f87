"""Per-tensor quantisation prediction: which ggml type llama.cpp gives each tensor, and its bytes.

One module per job, imported from its own home (this package re-exports nothing):

- tables: profiles/quants.toml (ggml block sizes, llama.cpp file types, fallbacks, aliases, EXL2
  bits) and the bytes a tensor takes;
- names: a user's quant name -> the canonical one;
- shapes: the GGUF tensors (names, shapes, loader order) of a ModelSpec, and its parameter count;
- family_shapes: the MoE, MLA and hybrid families' per-layer tensors, as llama.cpp's loaders make them;
- rules: llama.cpp's quantiser's per-tensor type choice (llama_tensor_get_type), ported;
- predict: the typed, sized tensors of a file type (predict_tensors);
- exl2: an EXL2 conversion's tensors and exllamav2's KV cache bytes.

Pure: tomllib only, no torch, no llama_cpp (the planner imports this).
"""
