"""The no-tool baseline environments (sculptor_rl.envs.baselines), on the embedded model's tokenizer."""

import random

import pytest

from sculptor_rl.envs.acm import ACM_SYSTEM_PROMPT
from sculptor_rl.envs import make_env_factory
from sculptor_rl.envs.baselines.env import BASELINE_SYSTEM_PROMPT, FullEnv, bm25_context, chunks, truncate_context
from sculptor_rl.envs.tasks import generate
from sculptor_rl.longcontext.common import filler_sentences
from sculptor_rl.records import context_spans


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


def split(record: dict, text: str) -> tuple[str, str, str]:
    """(before, context, after) of `text`, the (shrunk) message that holds the record's one context span."""
    ((i, lo, hi),) = context_spans(record)
    tail = len(record["messages"][i]["content"]) - hi
    return text[:lo], text[lo:len(text) - tail], text[len(text) - tail:]


def test_the_context_comes_from_the_record_and_a_record_without_it_is_an_error(task, tok):
    """No layout convention: a context span anywhere in the message; none at all is an error naming the task."""
    context = "\n".join(" ".join(filler_sentences(random.Random(k), 400)) for k in range(20))
    text = f"<doc>{context}</doc> Question: what is it?"  # no blank lines at all
    mine = {"id": "mine", "task": "babilong", "messages": [{"role": "user", "content": text}], "answer": "x",
            "meta": {"context": [{"message": 0, "start": 5, "end": 5 + len(context)}]}}
    for name in ("truncate", "bm25"):
        before, kept, after = split(mine, shown(mine, name, tok, context_budget=100, chunk_tokens=50)["messages"][1]["content"])
        assert (before, after) == ("<doc>", "</doc> Question: what is it?") and 0 < n_tokens(tok, kept) <= 100
        with pytest.raises(ValueError, match="task 'mine': no meta.context"):
            shown({**mine, "meta": {}}, name, tok)


@pytest.mark.parametrize("budget", [50, 300, 1000])
def test_truncate_keeps_the_question_and_fits_the_budget(task, tok, budget):
    out = shown(task, "truncate", tok, context_budget=budget)
    intro, context, question = split(task, task["messages"][0]["content"])
    intro2, kept, question2 = split(task, out["messages"][1]["content"])
    assert (intro2, question2) == (intro, question)
    assert context.endswith(kept) and len(kept) < len(context)  # the last part of the context
    assert budget - 3 <= n_tokens(tok, kept) <= budget  # whole words: at most a word short of the budget
    assert context[len(context) - len(kept) - 1].isspace()  # it starts at a word
    assert task["messages"][0]["content"] != out["messages"][1]["content"]  # the task itself is untouched


def test_truncate_leaves_a_short_context_alone(tok):
    assert truncate_context("one line\ntwo lines", 100, tok) == "one line\ntwo lines"
    assert truncate_context("alpha beta gamma delta epsilon zeta", 3, tok).endswith("zeta")


def test_chunks_cover_the_text_at_line_breaks(task, tok):
    context = split(task, task["messages"][0]["content"])[1]
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
    (one,) = bm25_context([context], question, budget=100, chunk_tokens=100, tokenizer=tok)
    assert "The vault code is 4417" in one and "born in a small harbor" not in one
    assert n_tokens(tok, one) <= 100
    (two,) = bm25_context([context], question, budget=200, chunk_tokens=100, tokenizer=tok)
    assert two.index("Ursula was born") < two.index("The vault code")  # kept chunks stay in document order
    assert n_tokens(tok, two) <= 200
    # a context in several pieces (a chat's turns): chunks of all pieces ranked together, each kept in its piece
    first, second = bm25_context(["\n".join(lines[:10]), "\n".join(lines[10:])], question, 100, 100, tok)
    assert first == "" and "The vault code is 4417" in second


def test_a_context_in_several_messages_is_shrunk_as_one_text(tok):
    """MRCR's chat: every earlier turn is context; truncate keeps the last budget tokens of them together."""
    turns = [" ".join(filler_sentences(random.Random(k), 300)) for k in range(6)]
    chat = [{"role": ("user", "assistant")[k % 2], "content": t} for k, t in enumerate(turns)]
    chat.append({"role": "user", "content": "Repeat the 2nd reply."})
    record = {"id": "chat", "task": "mrcr", "messages": chat, "answer": turns[3],
              "meta": {"context": [{"message": k, "start": 0, "end": len(t)} for k, t in enumerate(turns)]}}
    out = shown(record, "truncate", tok, context_budget=n_tokens(tok, turns[5]) + 20)["messages"][1:]
    assert [m["role"] for m in out] == [m["role"] for m in chat]  # the chat keeps its turns
    assert out[5]["content"] == turns[5] and turns[4].endswith(out[4]["content"]) and out[4]["content"]
    assert [m["content"] for m in out[:4]] == [""] * 4 and out[6] == chat[6]


def test_bm25_mode_on_a_generated_task(tok):
    task = generate("babilong", 1, seed=5, facts=1, context_tokens=3000)[0]
    out = shown(task, "bm25", tok, context_budget=400, chunk_tokens=100)
    intro, kept, question = split(task, out["messages"][1]["content"])
    assert question == split(task, task["messages"][0]["content"])[2]
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
    ((_, lo, hi),) = context_spans(task)  # the context is now in the record's message 1
    mine = {**task, "messages": [{"role": "system", "content": "Be brief."}, task["messages"][0]],
            "meta": {**task["meta"], "context": [{"message": 1, "start": lo, "end": hi}]}}
    system, user = shown(mine, "truncate", tok, context_budget=100)["messages"]
    assert system["content"] == f"{BASELINE_SYSTEM_PROMPT}\n\nBe brief."
    assert user["content"] == shown(task, "truncate", tok, context_budget=100)["messages"][1]["content"]


def test_original_is_the_whole_context(task, tok):
    """Context reduction is measured against what the baseline started from, not what it kept."""
    env = make_env_factory("truncate", {"context_budget": 100}, tokenizer=tok)(task, 0)
    assert env.original() == [{"role": "system", "content": BASELINE_SYSTEM_PROMPT}, *task["messages"]]
    env.append({"role": "assistant", "content": "x"})
    assert len(env.original()) == len(env.render()) == 3


def test_unknown_environment(task, tok):
    with pytest.raises(ValueError, match="unknown environment 'rag'"):
        make_env_factory("rag")
