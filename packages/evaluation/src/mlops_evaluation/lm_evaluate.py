"""The Hugging Face causal LM's gate suite (:class:`HFSuite`): gathers the inputs of its gates
(:mod:`mlops_evaluation.lm_gates`); the runner's loop (:func:`mlops_evaluation.suite.run_suite`) runs them.

The reference is the champion when there is one, else the pretrained checkpoint the candidate was fine-tuned
from (``features.checkpoint`` in its ``model.json``): a fine-tune must at least beat what it started from.
The held-out set is training's own validation split (``held_out`` over the data gate's accepted examples,
the candidate's tokenizer, ``seq_len``), fingerprinted in the report; only completion tokens are scored for
perplexity, and the same examples' prompts are answered greedily for the task (:mod:`mlops_evaluation.lm_task`).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlops_config import EvaluationConfig, TrainingConfig
from mlops_evaluation.errors import EvaluationError
from mlops_evaluation.gates import LM_GATES, GateResult
from mlops_evaluation.latency import ORDERS, one_torch_thread
from mlops_evaluation.lm_gates import (
    contract_facts,
    decode_determinism_gate,
    hf_contract_gate,
    ids_digest,
    perplexity_gate,
)
from mlops_evaluation.lm_latency import GenerationTiming, lm_latency_rounds
from mlops_evaluation.lm_task import TaskScores, score_answers, task_verdict
from mlops_evaluation.suite import run_suite

if TYPE_CHECKING:
    import torch


@dataclass
class HFModel:
    """A Hugging Face folder loaded for evaluation (float32, eval mode, CPU)."""

    folder: Path
    model: Any
    tokenizer: Any


def load_hf(folder: Path) -> HFModel:
    """``AutoModelForCausalLM`` + ``AutoTokenizer`` from ``folder`` (a merged export or a pretrained folder)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (folder / "config.json").is_file():
        raise EvaluationError(f"{str(folder)!r} has no config.json: expected a Hugging Face folder (an adapter-only "
                              "export cannot be gated; export it merged)")
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    return HFModel(folder, model, AutoTokenizer.from_pretrained(str(folder)))


def reference_folder(meta: dict[str, Any], root: Path) -> Path:
    """The local pretrained folder named by the candidate's ``features.checkpoint``."""
    named = (meta.get("features") or {}).get("checkpoint")
    if not named:
        raise EvaluationError("the candidate's model.json names no features.checkpoint: with no champion there is "
                              "no reference to gate against")
    path = Path(str(named)) if Path(str(named)).is_absolute() else root / str(named)
    if not (path / "config.json").is_file():
        raise EvaluationError(f"base checkpoint {str(named)!r} (the reference when there is no champion) is not a "
                              f"local Hugging Face folder at {str(path)!r}: make it (dvc repro datasets/dvc.yaml)")
    return path


def held_out_set(meta: dict[str, Any], training: TrainingConfig | None, root: Path, tokenizer: Any
                 ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Input ids and labels (``-100`` off the completion) of the validation split, and its description."""
    from mlops_features import read_examples, validate_instructions
    from mlops_training import encode_padded, held_out

    features = meta.get("features") or {}
    lm = training.causal_lm if training is not None else None
    dataset = features.get("dataset") or (lm.dataset if lm else None)
    seq_len = int(features.get("seq_len") or (lm.seq_len if lm else 0))
    fraction = float(features.get("val_fraction") or (lm.val_fraction if lm else 0.1))
    if not dataset or seq_len < 1:
        raise EvaluationError(f"cannot tell the held-out set: dataset {dataset!r}, seq_len {seq_len!r} (from the "
                              "candidate's model.json features or training.causal_lm)")
    source = Path(dataset) if Path(dataset).is_absolute() else root / dataset
    with tempfile.TemporaryDirectory() as tmp:
        gate = validate_instructions(source, Path(tmp), tokenizer, max_tokens=seq_len)
        examples = [e for e in read_examples(Path(gate.accepted_path)) if held_out(e, fraction)]
    if not examples:
        raise EvaluationError(f"{dataset!r} has no held-out examples at val_fraction {fraction}")
    ids, labels = encode_padded(tokenizer, examples, seq_len)
    described = {"rows": len(examples), "dataset": str(dataset), "val_fraction": fraction, "seq_len": seq_len,
                 "fingerprint": ids_digest(ids.tolist()), "accepted_sha256": gate.accepted_sha256, "positives": None,
                 "examples": examples}
    return ids, labels, described


def task_scores(hf: HFModel, examples: Sequence[dict[str, str]]) -> TaskScores:
    """Greedy answers of ``hf`` to each example's prompt, encoded as serving encodes a completion prompt, with
    room for the longest reference and its end of sequence; scored by :func:`score_answers`."""
    tok = hf.tokenizer
    refs = [tok.encode(e["completion"], add_special_tokens=False) for e in examples]
    room = max(len(r) for r in refs) + 2
    answers_ids = greedy_batched(hf, [e["prompt"] for e in examples], room)
    stop = [ids[:ids.index(tok.eos_token_id)] if tok.eos_token_id in ids else ids for ids in answers_ids]
    texts = [tok.decode(ids, skip_special_tokens=True) for ids in stop]
    return score_answers(texts, answers_ids, [e["completion"] for e in examples], refs, tok.eos_token_id)


def quality_on_task(cand: HFModel, ref: HFModel, ids: np.ndarray, labels: np.ndarray,
                    examples: Sequence[dict[str, str]], evaluation: EvaluationConfig, *, ref_name: str,
                    seed: int) -> GateResult:
    """The LM's quality gate: the task (exact match and token accuracy of greedy answers on the held-out
    examples, at most ``lm.task_max_examples`` evenly spaced, an absolute floor and the reference's rate,
    :mod:`mlops_evaluation.lm_task`) and perplexity on all of them against the reference (:func:`perplexity_gate`);
    both must pass."""
    c_nll, tokens = example_nll(cand.model, ids, labels)
    r_nll, _ = example_nll(ref.model, ids, labels)
    ppl = perplexity_gate(c_nll, r_nll, tokens, evaluation, reference=ref_name, seed=seed)
    step = -(-len(examples) // evaluation.lm.task_max_examples)
    examples = list(examples)[::step]
    task_ok, task_reason, task = task_verdict(task_scores(cand, examples), task_scores(ref, examples),
                                              floor=evaluation.lm.min_exact_match,
                                              max_drop=evaluation.lm.max_exact_match_drop, reference_name=ref_name)
    return GateResult("quality", task_ok and ppl.passed, f"task: {task_reason}; perplexity: {ppl.reason}",
                      {**ppl.evidence, "task": task, "perplexity_passed": ppl.passed})


def example_nll(model: torch.nn.Module, ids: np.ndarray, labels: np.ndarray, batch: int = 16
                ) -> tuple[np.ndarray, np.ndarray]:
    """Per example: summed next-token NLL (nats) over completion tokens, and how many tokens that is."""
    import torch
    from torch.nn import functional

    sums, counts = [], []
    with torch.inference_mode():
        for i in range(0, len(ids), batch):
            x, y = torch.from_numpy(ids[i:i + batch]), torch.from_numpy(labels[i:i + batch])
            logits = model(input_ids=x).logits.float()
            nll = functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100,
                                           reduction="none").reshape(y.shape)
            sums.append(nll.sum(dim=1).double().numpy())
            counts.append((y != -100).sum(dim=1).numpy())
    return np.concatenate(sums), np.concatenate(counts).astype(np.float64)


def _generate(hf: HFModel, prompt: str, max_new_tokens: int, streamer: Any = None, exact: bool = False) -> list[int]:
    import torch

    enc = hf.tokenizer(prompt, return_tensors="pt")
    with torch.inference_mode():
        out = hf.model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens, streamer=streamer,
                                min_new_tokens=max_new_tokens if exact else None,
                                pad_token_id=hf.tokenizer.pad_token_id)
    return [int(t) for t in out[0, enc["input_ids"].shape[1]:]]


def greedy(hf: HFModel, prompts: Sequence[str], max_new_tokens: int) -> list[list[int]]:
    """Greedy completions (new token ids) of each prompt."""
    return [_generate(hf, p, max_new_tokens) for p in prompts]


def greedy_batched(hf: HFModel, prompts: Sequence[str], max_new_tokens: int, batch: int = 32) -> list[list[int]]:
    """Greedy completions (new token ids, up to and with the first end of sequence) of each prompt, ``batch``
    prompts per ``generate`` call: the ids :func:`greedy` gives, at a fraction of its cost.

    Prompts are padded on the left and masked (``generate`` derives each row's positions from the mask), so a
    row's logits are its own prompt's; a finished row is padded until the batch ends, and those pads are cut.
    One call per prompt spent most of its time in ``generate``'s per-call and per-token overhead: the quality
    gate's 2 x 107 answers of the test checkpoint took minutes on a loaded 2-core machine.
    """
    import torch

    tok, eos = hf.tokenizer, hf.tokenizer.eos_token_id
    out: list[list[int]] = []
    with torch.inference_mode():
        for i in range(0, len(prompts), batch):
            enc = tok(list(prompts[i:i + batch]), return_tensors="pt", padding=True, padding_side="left")
            ids = hf.model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens,
                                    pad_token_id=tok.pad_token_id)[:, enc["input_ids"].shape[1]:].tolist()
            out += [row[:row.index(eos) + 1] if eos in row else row for row in ids]
    return out


class _FirstToken:
    """A ``transformers`` streamer that notes when the first new token arrives (the first ``put`` is the prompt):
    CPU time of this process and wall-clock."""

    def __init__(self) -> None:
        self.puts = 0
        self.first: tuple[float, float] | None = None

    def put(self, value: Any) -> None:
        self.puts += 1
        if self.puts == 2:
            self.first = (time.process_time(), time.perf_counter())

    def end(self) -> None:
        pass


def timed_generation(hf: HFModel, prompt: str, new_tokens: int) -> GenerationTiming:
    """Generate exactly ``new_tokens`` greedily; time to the first one and to the end."""
    streamer = _FirstToken()
    c0, t0 = time.process_time(), time.perf_counter()
    out = _generate(hf, prompt, new_tokens, streamer, exact=True)
    c1, t1 = time.process_time(), time.perf_counter()
    first_c, first_t = streamer.first or (c1, t1)
    return GenerationTiming(first_c - c0, c1 - c0, len(out), wall_ttft_s=first_t - t0, wall_total_s=t1 - t0)


def interleaved(reference: HFModel, candidate: HFModel, prompts: Sequence[str], *, timed: int, warmup: int,
                new_tokens: int) -> tuple[list[GenerationTiming], list[GenerationTiming], list[GenerationTiming]]:
    """Reference (A), candidate (B), reference again (A′) per round, in the latency gate's rotating orders, on
    one torch thread (so the process's CPU time is the generation's own, with no idle worker threads spinning)."""
    models = (reference, candidate, reference)
    series: tuple[list[GenerationTiming], ...] = ([], [], [])
    with one_torch_thread():
        for i in range(warmup + timed):
            for k in ORDERS[i % len(ORDERS)]:
                t = timed_generation(models[k], prompts[i % len(prompts)], new_tokens)
                if i >= warmup:
                    series[k].append(t)
    return series[0], series[1], series[2]


def generation_latency(ref: HFModel, cand: HFModel, prompts: Sequence[str], evaluation: EvaluationConfig,
                       ref_name: str, seed: int = 0) -> GateResult:
    """The latency gate (:mod:`mlops_evaluation.lm_latency`): rounds of ``lm.generation_requests`` interleaved
    generations until it can tell, at most ``lm.generation_max_rounds``; the warm-up runs in the first round only."""
    rounds = iter(range(evaluation.lm.generation_max_rounds))

    def measure() -> tuple[list[GenerationTiming], ...]:
        warm = evaluation.lm.generation_warmup if next(rounds) == 0 else 0
        return interleaved(ref, cand, prompts, timed=evaluation.lm.generation_requests, warmup=warm,
                           new_tokens=evaluation.lm.max_new_tokens)

    return lm_latency_rounds(measure, max_rounds=evaluation.lm.generation_max_rounds,
                             tolerance=evaluation.latency_tolerance, max_noise=evaluation.lm.generation_max_noise,
                             reference=ref_name, warmup=evaluation.lm.generation_warmup,
                             wall_max_ratio=evaluation.lm.generation_wall_max_ratio, confidence=evaluation.confidence,
                             seed=seed)


class HFSuite:
    """The HF causal LM's gates against the champion ``(label, model)`` or else the base checkpoint, on training's
    validation split: the task and perplexity, the replay of recorded training with the greedy-decoding check
    beside it, generation latency, and the tokenizer and context contract."""

    gates: tuple[str, ...] = LM_GATES

    def __init__(self, cand: HFModel, cand_meta: dict[str, Any], champion: tuple[str, HFModel] | None,
                 evaluation: EvaluationConfig, training: TrainingConfig | None, root: Path, seed: int,
                 replay: Callable[[], GateResult] | None = None) -> None:
        self.cand, self.evaluation, self.seed, self.replay = cand, evaluation, seed, replay
        self.ref_name, self.ref = champion if champion else ("base checkpoint",
                                                             load_hf(reference_folder(cand_meta, root)))
        self.ids, self.labels, self.holdout = held_out_set(cand_meta, training, root, cand.tokenizer)
        self.examples = self.holdout.pop("examples")
        self.holdout["reference"] = self.ref_name
        self.prompts = list(evaluation.lm.prompts)

    def quality(self) -> GateResult:
        return quality_on_task(self.cand, self.ref, self.ids, self.labels, self.examples, self.evaluation,
                               ref_name=self.ref_name, seed=self.seed)

    def reproducibility(self) -> list[GateResult]:
        """``replay`` (the runner's ``check_reproducibility``, the replay every family gets); without it, a folder
        with no recorded run, the gate is "not verifiable" and fails. The greedy-decoding check runs beside it under
        its own name."""
        replayed = self.replay() if self.replay is not None else GateResult(
            "reproducibility", False, "not verifiable: no recorded training run to replay (a folder gated "
            "without its registry version); the greedy-decoding check below shows determinism only",
            {"verifiable": False})
        new_tokens = self.evaluation.lm.max_new_tokens
        first = greedy(self.cand, self.prompts, new_tokens)
        second = greedy(load_hf(self.cand.folder), self.prompts, new_tokens)
        return [replayed, decode_determinism_gate(self.prompts, first, second, max_new_tokens=new_tokens)]

    def latency(self) -> GateResult:
        return generation_latency(self.ref, self.cand, self.prompts, self.evaluation, self.ref_name, self.seed)

    def contract(self) -> GateResult:
        return hf_contract_gate(contract_facts(self.cand.tokenizer, self.cand.model.config),
                                contract_facts(self.ref.tokenizer, self.ref.model.config),
                                reference_name=self.ref_name, seq_len=self.holdout["seq_len"])


def hf_gates(cand: HFModel, cand_meta: dict[str, Any], champion: tuple[str, HFModel] | None, gates: Sequence[str],
             evaluation: EvaluationConfig, training: TrainingConfig | None, root: Path, seed: int,
             replay: Callable[[], GateResult] | None = None) -> tuple[list[GateResult], dict[str, Any]]:
    """Run ``gates`` of :class:`HFSuite` on a loaded folder through the runner's loop (:func:`.suite.run_suite`);
    their results and the held-out set described."""
    suite = HFSuite(cand, cand_meta, champion, evaluation, training, root, seed, replay)
    return run_suite(suite, gates), suite.holdout
