"""rlpt.kernels: attention behind one API (rlpt.kernels.api): reference (plain XLA) and faster implementations.

Installed as rlpt.kernels; imported as a bare `kernels` (the repository root on sys.path) it hands that name
back to its installed owner (Hugging Face's `kernels`, which transformers imports).
"""
if __name__ == "kernels":
    from rlpt._shadow import hand_back

    hand_back(__name__)
else:
    from rlpt.kernels.api import (  # noqa: F401
        ATTENTION_IMPLS,
        SEQUENCE_SHARDED_IMPLS,
        __all__,  # noqa: F401
        allgather_attention,
        attention,
        attention_mask,
        attention_over_two_key_sets,
        blockwise_attention,
        flash_attention,
        make_context_parallel_attention,
        make_ring_attention,
        reference_attention,
        register_attention,
        ring_attention,
    )
