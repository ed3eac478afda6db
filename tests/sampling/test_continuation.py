"""Multi-turn continuation: appended tokens + cached prefix == recomputing the whole sequence."""
import numpy as np
import pytest

from rlpt.sampling import continue_generation, generate
from tests.sampling.helpers import PROMPTS, log_softmax, teacher_forced, tiny_model


def check_turn(model, context, out, row):
    """Row `row` of `out` is greedy after `context`: argmax and raw log-probs of a full forward pass."""
    L = out.lengths[row]
    new = out.tokens[row, :L]
    logits = teacher_forced(model, context, new)
    np.testing.assert_array_equal(new, logits.argmax(-1), err_msg=f"row {row}")
    np.testing.assert_allclose(out.logprobs[row, :L], log_softmax(logits)[np.arange(L), new], atol=1e-5)
    return list(context) + list(new)


@pytest.mark.parametrize("phase", [32, 2])  # 2: the later turns decode in attention windows of 32 slots, then 49
def test_two_turns_match_full_recomputation(phase):
    model = tiny_model()
    first = generate(model, PROMPTS, 6, temperature=0.0, stop_ids=(3,), max_cache_len=48, decode_phase=phase)
    contexts = [check_turn(model, p, first, i) for i, p in enumerate(PROMPTS)]
    tool_outputs = [[20, 21, 22], None, [], [60, 61, 62, 63, 1, 2, 3, 4, 5], [9]]
    second = continue_generation(model, first, tool_outputs, 8, temperature=0.0, decode_phase=phase)
    assert first.state is None  # the cache moved into `second`
    assert second.lengths[1] == 0
    for i, extra in enumerate(tool_outputs):
        if extra is not None:
            contexts[i] = check_turn(model, contexts[i] + extra, second, i)
    third = continue_generation(model, second, [[5, 6], [7], None, [8], [1, 2, 3, 4]], [4, 4, 4, 4, 4],
                                temperature=0.0, decode_phase=phase)
    # Row 1 sat out turn 2 and resumes after its turn-1 tokens; row 2 sits out turn 3.
    contexts[1] = check_turn(model, contexts[1] + [7], third, 1)
    for i, extra in [(0, [5, 6]), (3, [8]), (4, [1, 2, 3, 4])]:
        check_turn(model, contexts[i] + extra, third, i)
    assert third.lengths[2] == 0


def test_sampled_continuation_logprobs_are_exact():
    model = tiny_model()
    first = generate(model, PROMPTS, 5, temperature=1.0, seed=3, max_cache_len=48)
    extra = [[i + 1, i + 2] for i in range(len(PROMPTS))]
    second = continue_generation(model, first, extra, 5, temperature=1.0)
    for i, prompt in enumerate(PROMPTS):
        context = prompt + list(first.tokens[i]) + extra[i]
        L = second.lengths[i]
        logits = teacher_forced(model, context, second.tokens[i, :L])
        np.testing.assert_allclose(second.logprobs[i, :L],
                                   log_softmax(logits)[np.arange(L), second.tokens[i, :L]], atol=1e-5)
    # A new turn draws from a fresh stream: the same context would otherwise repeat turn 1's randomness.
    assert not (second.tokens == first.tokens).all()


def test_continuation_errors():
    model = tiny_model()
    first = generate(model, PROMPTS, 6, temperature=0.0, max_cache_len=48)
    with pytest.raises(ValueError, match="one per row"):
        continue_generation(model, first, [[1]], 4)
    with pytest.raises(ValueError, match="exceed the cache"):
        continue_generation(model, first, [[1] * 60] + [None] * 4, 4)
    with pytest.raises(ValueError, match="all None"):
        continue_generation(model, first, [None] * 5, 4)
    continue_generation(model, first, [[1]] * 5, 2, temperature=0.0, keep_state=False)
    with pytest.raises(ValueError, match="no live state"):
        continue_generation(model, first, [[1]] * 5, 4)


def test_turn_budgets_share_compiled_shapes():
    """Multi-turn rollouts continue with a different remaining budget every turn: the token buffers are bucketed,
    so budgets 9-16 reuse one compiled append (each distinct width used to compile its own and hold host memory
    for it: an agent run ran out of memory at RL step 70), and the rows still stop at their own limits."""
    from rlpt.sampling import engine

    model = tiny_model()
    first = generate(model, PROMPTS, 4, temperature=0.0, max_cache_len=128)
    gen = continue_generation(model, first, [[1]] * 5, 9, temperature=0.0)  # from generate's buffers
    gen = continue_generation(model, gen, [[1]] * 5, 9, temperature=0.0)  # from a continuation's
    before = engine.append._cache_size()
    for budget in (10, 13, 16):
        gen = continue_generation(model, gen, [[2]] * 5, [budget, 1, 2, 3, 4], temperature=0.0)
        assert gen.lengths[1] <= 1 and gen.lengths[4] <= 4 and gen.tokens.shape == (5, budget)
    assert engine.append._cache_size() == before
