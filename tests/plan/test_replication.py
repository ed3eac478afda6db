"""The sharding check of a rehearsal: large per-device buffers left whole on a mesh axis they could be split on."""
import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from rlpt.plan import assert_sharded, replicated_buffers


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((2, 4), ("data", "fsdp"), devices=jax.devices()[:8])


def _buf(mesh, shape, spec):
    return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, P(*spec)))


def test_flags_a_large_buffer_whole_on_an_axis_that_could_split_it(mesh):
    named = [("w_whole", _buf(mesh, (1024, 1024), (None, None))),  # 4 MiB per device, whole on data and fsdp
             ("w_fsdp", _buf(mesh, (1024, 1024), ("fsdp", None))),  # split on fsdp, whole on data
             ("w_both", _buf(mesh, (1024, 1024), (("data", "fsdp"), None))),
             ("small", _buf(mesh, (16, 16), (None, None))),  # under the threshold
             ("odd", _buf(mesh, (1023, 1025), (None, None)))]  # no dimension divides: nothing to suggest
    bad = replicated_buffers(named, mesh, threshold_bytes=1 << 20)
    assert {(b["name"], b["axis"]) for b in bad} == {("w_whole", "data"), ("w_whole", "fsdp"), ("w_fsdp", "data")}
    assert replicated_buffers(named, mesh, 1 << 20, ignore=("data",)) == [b for b in bad if b["axis"] == "fsdp"]
    with pytest.raises(AssertionError, match=r"w_whole \[1024, 1024\].*mesh axis 'fsdp'"):
        assert_sharded(named, mesh, 1 << 20, ignore=("data",))
    assert_sharded(named[1:], mesh, 1 << 20, ignore=("data",))  # passes


def test_logical_spec_records_an_axis_a_dimension_does_not_divide(mesh):
    from rlpt.parallel.rules import logical_spec, recording_unsplit

    with recording_unsplit() as records:
        # 12 rows: data (2) divides them, data x fsdp (8) does not, so the rows stay whole on fsdp
        assert logical_spec(("batch", "act_seq", "act_vocab"), (12, 64, 1000), mesh) == P("data", None, None)
        assert logical_spec(("batch", None), (16, 3), mesh) == P(("data", "fsdp"), None)  # nothing dropped
    (r,) = records
    assert r["names"] == ("batch", "act_seq", "act_vocab") and r["dtype"] is None
    assert r["unsplit"] == [{"dim": 0, "logical": "batch", "dim_size": 12, "axis": "fsdp", "axis_size": 4, "split": 8}]
    tp = jax.make_mesh((2, 4), ("fsdp", "tensor"), devices=jax.devices()[:8])
    with recording_unsplit() as records:
        # 14 heads cannot take tensor (4) but head_dim takes it (the fallback rule): the weight is split
        assert logical_spec(("layers", "embed", "heads", "head_dim"), (2, 896, 14, 64), tp) == P(
            None, "fsdp", None, "tensor")
        assert logical_spec(("vocab", "embed"), (151937, 896), tp) == P(None, "fsdp")
    assert [(u["logical"], u["axis"], u["split"]) for r in records for u in r["unsplit"]] == [("vocab", "tensor", 4)]
    assert logical_spec(("vocab", "embed"), (151937, 896), tp) == P(None, "fsdp")  # no recorder: nothing kept


def test_unsplit_buffers_names_inputs_and_values_inside_a_program_with_a_fix(mesh):
    from rlpt.parallel.rules import constrain, logical_spec, recording_unsplit
    from rlpt.plan import unsplit_buffers

    shape = (12, 3, 100001)  # 7.2 MB per device; no dimension divides by fsdp (4): replicated_buffers sees nothing
    with recording_unsplit() as records:
        rows = _buf(mesh, shape, logical_spec(("batch", None, None), shape, mesh))
        logits = jax.ShapeDtypeStruct((12, 64, 4096), jnp.float32, sharding=NamedSharding(mesh, P("data")))
        with jax.set_mesh(mesh):  # a value constrained inside a jitted program (not one of its inputs)
            jax.jit(lambda x: constrain(x * 2, ("batch", "act_seq", "act_vocab"))).trace(logits)
    named = [("in.rows", rows)]
    assert replicated_buffers(named, mesh, 1 << 20) == []
    bad = unsplit_buffers(named, records, mesh, 1 << 20)
    assert [(b["name"], b["logical"], b["axis"], b["dim_size"], b["split"]) for b in bad] == [
        ("in.rows", "batch", "fsdp", 12, 8),
        ("tests.plan.test_replication.test_unsplit_buffers_names_inputs_and_values_inside_a_program_with_a_fix: "
         "value ('batch', 'act_seq', 'act_vocab')", "batch", "fsdp", 12, 8)]
    assert bad[0]["bytes"] == 6 * 3 * 100001 * 4 and bad[1]["bytes"] == 6 * 64 * 4096 * 4
    assert bad[0]["fix"].startswith("rows per micro-batch a multiple of 8") and "mesh.fsdp=2" in bad[0]["fix"]
    assert unsplit_buffers(named, records, mesh, 1 << 20, ignore=("fsdp",)) == []
    assert unsplit_buffers(named, records, mesh, 64 << 20) == []  # under the threshold
    with pytest.raises(AssertionError, match=r"in.rows \[12, 3, 100001\].*dim 0 \(batch=12\) does not divide by 8"):
        assert_sharded(named, mesh, 1 << 20, records=records)
    assert_sharded(named, mesh, 1 << 20)  # without the records only whole-but-divisible buffers fail


def test_unsplit_fix_pads_the_vocabulary_or_moves_the_axis():
    from rlpt.plan.analyze import unsplit_fix

    tp = jax.make_mesh((2, 4), ("fsdp", "tensor"), devices=jax.devices()[:8])
    u = {"dim": 0, "logical": "vocab", "dim_size": 151937, "axis": "tensor", "axis_size": 4, "split": 4}
    fix = unsplit_fix(u, ("vocab", "embed"), (151937, 896), P(None, "fsdp"), tp)
    assert fix == ("pad the vocabulary to 151940 (model.vocab_size; a multiple of 4); or a rule mapping 'embed' "
                   "(dim 1, 896) onto 'tensor' (mesh.rules)")
    u = {"dim": 1, "logical": "act_kv_heads", "dim_size": 2, "axis": "tensor", "axis_size": 4, "split": 4}
    fix = unsplit_fix(u, ("batch", "act_kv_heads", "cache_seq", "act_head_dim"), (256, 2, 1032, 64),
                      P("fsdp", None, None, None), tp)
    assert "mesh.tensor=2" in fix and "a rule mapping 'act_head_dim' (dim 3, 64) onto 'tensor'" in fix


def test_input_copies_lists_inputs_the_program_copies_at_entry():
    from rlpt.plan.analyze import input_copies

    hlo = """HloModule jit_decode, entry_computation_layout={(u16[4,8,4097,128]{3,1,2,0})->u16[4,8,4097,128]{3,1,2,0}}

ENTRY %main.1 (param.1: u16[4,8,4097,128], param.2: f32[4]) -> u16[4,8,4097,128] {
  %param.1 = u16[4,8,4097,128]{3,1,2,0:T(8,128)(2,1)} parameter(0), metadata={op_name="state.cache[\\'k\\'][0]"}
  %param.2 = f32[4]{0} parameter(1), metadata={op_name="state.logprobs"}
  %copy.1 = u16[4,8,4097,128]{3,2,1,0:T(8,128)(2,1)} copy(%param.1), metadata={op_name="jit(decode)/while"}
  %copy.2 = f32[4]{0} copy(%param.2)
  %param.3 = u16[4,8,4097,128]{3,1,2,0:T(8,128)(2,1)} parameter(2), metadata={op_name="state.cache[\\'v\\'][0]"}
  %copy-start.1 = (u16[4,8,4097,128]{3,1,2,0:S(1)}, u16[4,8,4097,128]{3,1,2,0}, u32[]) copy-start(%param.3)
  %copy-done.1 = u16[4,8,4097,128]{3,1,2,0:T(8,128)(2,1)S(1)} copy-done(%copy-start.1)
  %copy.4 = u16[4,8,4097,128]{3,2,1,0:T(8,128)(2,1)} copy(%copy-done.1)
  ROOT %copy.3 = u16[4,8,4097,128]{3,1,2,0:T(8,128)(2,1)} copy(%copy.1)
}
"""
    (c,) = input_copies(hlo, 1 << 20)  # the second reaches its copy through an async move between memory spaces
    assert c == {"input": "state.cache['k'][0]", "count": 2, "from": "u16[4,8,4097,128]{3,1,2,0:T(8,128)(2,1)}",
                 "to": "u16[4,8,4097,128]{3,2,1,0:T(8,128)(2,1)}", "bytes": 2 * 4 * 8 * 4097 * 128 * 2}
