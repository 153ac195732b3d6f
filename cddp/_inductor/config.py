"""torch._inductor.config: the knobs scripts set, with torch's defaults (cddp/_config_module.py)."""
import sys

from .._config_module import ConfigModule

sys.modules[__name__] = ConfigModule("torch._inductor.config", {
    "coordinate_descent_tuning": False, "coordinate_descent_check_all_directions": False,
    "max_autotune": False, "max_autotune_gemm": False, "max_autotune_pointwise": False,
    "freezing": False, "fx_graph_cache": True, "fx_graph_remote_cache": None,
    "autotune_local_cache": True, "epilogue_fusion": True, "aggressive_fusion": False,
    "force_fuse_int_mm_with_mul": False, "use_mixed_mm": True, "debug": False,
    "benchmark_kernel": False, "shape_padding": True, "permute_fusion": False,
    "emulate_precision_casts": False, "fallback_random": False, "split_reductions": True,
    "comprehensive_padding": True, "layout_optimization": True, "keep_output_stride": True,
    "conv_1x1_as_mm": False, "unroll_reductions_threshold": 8, "size_asserts": True,
    "implicit_fallbacks": True, "group_fusion": False, "pattern_matcher": True,
    "reorder_for_compute_comm_overlap": False,
    "triton": {"unique_kernel_names": True, "cudagraphs": False, "cudagraph_trees": True,
               "autotune_pointwise": True, "descriptive_names": "original_aten",
               "max_tiles": None, "multi_kernel": 0, "use_block_ptr": False},
    "cpp": {"simdlen": None, "threads": -1, "enable_kernel_profile": False,
            "weight_prepack": True, "dynamic_threads": False},
})
