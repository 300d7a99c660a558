"""The no-tool baseline environments (sculptor_rl.envs.baselines), on the embedded model's tokenizer."""

import random

import pytest

from sculptor_rl.envs import ACM_SYSTEM_PROMPT, make_env_factory
from sculptor_rl.envs.baselines import (BASELINE_SYSTEM_PROMPT, FullEnv, bm25_context, chunks, split_user,
                                        truncate_context)
from sculptor_rl.tasks import generate
from sculptor_rl.tasks.common import filler_sentences


def shown(task, name, tok, **params):
    """What environment `name` shows of `task` (its messages: the system prompt, then the task's)."""
    return {**task, "messages": make_env_factory(name, params, tokenizer=tok)(task, 0).render()}


@pytest.fixture(scope="module")
def tok(fmt):
    return fmt.tokenizer


def n_tokens(tok, text):
    return len(tok.encode(text, add_special_tokens=False))


@pytest.fixture(scope="module")
def task():
    return generate("needlebench", 1, seed=3, context_tokens=2000)[0]


def test_split_user_recovers_the_parts(task):
    intro, context, question = split_user(task["messages"][0]["content"])
    assert intro.startswith("Read the following text") and question.startswith("Following only")
    assert f"{intro}\n\n{context}\n\n{question}" == task["messages"][0]["content"]
    with pytest.raises(ValueError, match="intro"):
        split_user("a question without any context")


@pytest.mark.parametrize("budget", [50, 300, 1000])
def test_truncate_keeps_the_question_and_fits_the_budget(task, tok, budget):
    out = shown(task, "truncate", tok, context_budget=budget)
    intro, context, question = split_user(task["messages"][0]["content"])
    intro2, kept, question2 = split_user(out["messages"][1]["content"])
    assert (intro2, question2) == (intro, question)
    assert context.endswith(kept) and len(kept) < len(context)  # the last part of the context
    assert budget - 3 <= n_tokens(tok, kept) <= budget  # whole words: at most a word short of the budget
    assert context[len(context) - len(kept) - 1].isspace()  # it starts at a word
    assert task["messages"][0]["content"] != out["messages"][1]["content"]  # the task itself is untouched


def test_truncate_leaves_a_short_context_alone(tok):
    assert truncate_context("one line\ntwo lines", 100, tok) == "one line\ntwo lines"
    assert truncate_context("alpha beta gamma delta epsilon zeta", 3, tok).endswith("zeta")


def test_chunks_cover_the_text_at_line_breaks(task, tok):
    context = split_user(task["messages"][0]["content"])[1]
    pieces = chunks(context, 100, tok)
    assert "".join(pieces) == context and len(pieces) > 5
    assert all(n_tokens(tok, p) <= 101 for p in pieces)
    assert all(p[-1] in "\n " for p in pieces[:-1])  # never mid-word
    # a paragraph is a line of 3-6 sentences: most chunks end at a line break within their second half
    assert sum(p.endswith("\n") for p in pieces) >= len(pieces) / 2


def test_bm25_retrieves_the_chunk_with_the_needle(tok):
    rng = random.Random(0)
    lines = [" ".join(filler_sentences(rng, 300)) for _ in range(30)]
    lines[17] = "The vault code is 4417 and Ursula keeps it in the archive. " + lines[17]
    lines[4] = "Ursula was born in a small harbor town. " + lines[4]
    context = "\n".join(lines)
    question = "What is the vault code that Ursula keeps?"
    one = bm25_context(context, question, budget=100, chunk_tokens=100, tokenizer=tok)
    assert "The vault code is 4417" in one and "born in a small harbor" not in one
    assert n_tokens(tok, one) <= 100
    two = bm25_context(context, question, budget=200, chunk_tokens=100, tokenizer=tok)
    assert two.index("Ursula was born") < two.index("The vault code")  # kept chunks stay in document order
    assert n_tokens(tok, two) <= 200


def test_bm25_mode_on_a_generated_task(tok):
    task = generate("babilong", 1, seed=5, facts=1, context_tokens=3000)[0]
    out = shown(task, "bm25", tok, context_budget=400, chunk_tokens=100)
    intro, kept, question = split_user(out["messages"][1]["content"])
    assert question == split_user(task["messages"][0]["content"])[2]
    assert task["meta"]["person"] in kept  # the one fact names the asked person
    assert n_tokens(tok, kept) <= 400


def test_full_shows_the_whole_context_and_no_tools(task, fmt):
    env = make_env_factory("full")(task, 0)
    assert env.render()[1] == task["messages"][0] and env.render()[0]["content"] == BASELINE_SYSTEM_PROMPT
    assert isinstance(env, FullEnv) and env.tools == []
    prompt = fmt.tokenizer.decode(fmt.head_ids(env.render(), env.tools))
    assert "<tools>" not in prompt and "fragment_context" not in prompt
    assert not env.execute("fold_fragment", {"fragment_id": "fabcde"}).ok


def test_acm_keeps_the_task_and_has_the_six_tools(task, fmt):
    env = make_env_factory("acm")(task, 0)
    assert env.render() == [{"role": "system", "content": ACM_SYSTEM_PROMPT}, *task["messages"]]
    assert len(env.tools) == 6
    assert "<tools>" in fmt.tokenizer.decode(fmt.head_ids(env.render(), env.tools))


def test_users_own_system_prompt_is_kept_after_the_baselines(task, tok):
    mine = {**task, "messages": [{"role": "system", "content": "Be brief."}, task["messages"][0]]}
    system = shown(mine, "truncate", tok, context_budget=100)["messages"][0]["content"]
    assert system == f"{BASELINE_SYSTEM_PROMPT}\n\nBe brief."


def test_original_is_the_whole_context(task, tok):
    """Context reduction is measured against what the baseline started from, not what it kept."""
    env = make_env_factory("truncate", {"context_budget": 100}, tokenizer=tok)(task, 0)
    assert env.original() == [{"role": "system", "content": BASELINE_SYSTEM_PROMPT}, *task["messages"]]
    env.append({"role": "assistant", "content": "x"})
    assert len(env.original()) == len(env.render()) == 3


def test_unknown_environment(task, tok):
    with pytest.raises(ValueError, match="unknown environment 'rag'"):
        make_env_factory("rag")
