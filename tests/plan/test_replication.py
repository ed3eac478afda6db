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
