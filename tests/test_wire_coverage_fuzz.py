"""Coverage-guided fuzzing of wire/ (atheris): the Kafka request parser, the AMQP server codec, the
stream-protocol codec and the record-batch reader take any bytes and fail only with their own errors.

Each target runs for WIRE_FUZZ_SECONDS (15 in CI; longer by hand) from the captured client
traffic (compat_tests/fuzz/coverage.py); libFuzzer exits non-zero and writes the input on the
first other exception. The run must also find branches its seeds did not reach, which shows
the guidance works (an instrumentation that silently broke would fuzz blind).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

SECONDS = int(os.environ.get("WIRE_FUZZ_SECONDS", "15"))
SEED = int(os.environ.get("WIRE_FUZZ_SEED", str(time.time_ns() % 100_000)))


@pytest.mark.timeout(SECONDS + 120)
@pytest.mark.parametrize("target", ["kafka", "amqp", "stream", "records"])
def test_wire_codecs_survive_coverage_guided_fuzzing(target, tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "compat_tests.fuzz.coverage", target, "--seed-corpus", str(tmp_path / "corpus"),
         f"-max_total_time={SECONDS}", f"-seed={SEED}", "-max_len=4096", f"-artifact_prefix={tmp_path}/"],
        capture_output=True, text=True, timeout=SECONDS + 100)
    output = run.stdout + run.stderr
    print(f"[coverage {target}] seed {SEED}: " + " | ".join(
        line for line in output.splitlines() if "INITED" in line or "DONE" in line))
    assert run.returncode == 0, f"seed {SEED}: the {target} codec raised something else:\n{output[-6000:]}"
    assert not list(tmp_path.glob("crash-*"))
    inited = re.search(r"INITED cov: (\d+)", output)
    done = re.search(r"DONE\s+cov: (\d+)", output)
    assert inited and done, output[-3000:]
    assert int(done.group(1)) > int(inited.group(1)), "no new coverage: is wire/ instrumented?"
