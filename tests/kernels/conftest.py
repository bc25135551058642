"""The ``slow`` marks of ``test_distance_kernel.py``'s tests, given here by name.

That module is being edited on another branch; until the two are merged, its marks live
here so that the module itself keeps its content. The tests named below run the Triton
kernels in the interpreter at many shapes, whole layers and models, or the self-check; the
fast loop (``-m "not slow"``) keeps the kernel against the naive softmax, float16, the
dropout mask and the refusals.
"""

from __future__ import annotations

import pytest

SLOW_DISTANCE_KERNEL_TESTS = {
    "test_self_check_passes_and_catches_a_wrong_kernel",
    "test_layer_with_the_fused_kernel_equals_the_bias",
    "test_distance_rows_attention_is_the_written_out_sum",
    "test_models_with_the_fused_kernel",
    "test_layer_with_dropout_equals_the_explicit_path_with_the_kernels_mask",
    "test_rows_in_bands_are_narrower_and_the_same_sums",
    "test_distance_rows_attention_with_dropout",
    "test_rows_in_the_tiles_with_other_tile_shapes",
    "test_rows_at_random_shapes",
    "test_dropout_equals_the_naive_softmax_with_its_mask",
    "test_clipped_relative_attention_is_shaws",
    "test_dropout_mask_does_not_depend_on_the_tiles",
    "test_clipped_relative_attention_with_dropout",
    "test_rows_in_tile_is_the_module_switch_by_default",
    "test_other_tile_shapes",
    "test_rows_as_one_table_where_not_banded",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = getattr(item, "module", None)
        if (module is not None and module.__name__.endswith(".test_distance_kernel")
                and getattr(item, "originalname", item.name) in SLOW_DISTANCE_KERNEL_TESTS):
            item.add_marker(pytest.mark.slow)
