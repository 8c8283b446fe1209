"""Server-log facts across vLLM's log formats, on the real CPU log and on the documented historic lines."""

from __future__ import annotations

from pathlib import Path

from vllm_tune.tools.diagnose.logs import parse_log, stats_seconds

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLE = (DATA / "diagnose" / "server-log-sample.txt").read_text()


def test_real_cpu_log() -> None:
    facts = parse_log(SAMPLE)
    assert facts.version == "0.32.0"
    assert facts.serve_args["max_num_seqs"] == 4 and facts.serve_args["num_gpu_blocks_override"] == 10
    assert (facts.kv_cache_tokens, facts.kv_device, facts.max_concurrency) == (1280, "CPU", 1.25)
    assert facts.prefix_caching is True and facts.capture_sizes == []
    first = facts.stats[0]
    assert (first.running, first.waiting, first.kv_device, first.kv_usage) == (2, 7, "CPU", 0.778)
    assert first.time == "12-03 06:20:41" and not first.v0_format
    assert [s.prefix_hit_rate for s in facts.stats][-1] == 0.396
    assert stats_seconds(facts) == 40.0  # four lines 10 s apart
    (moe,) = facts.moe_default_config  # section 4 of the sample: printed by a direct get_moe_configs call
    assert (moe.experts, moe.n, moe.device_name) == (8, 7168, "cpu")
    assert facts.http_status == {"2xx": 3}


def test_recorded_state_logs() -> None:
    thrash = parse_log((DATA / "captures" / "kv_thrash.log").read_text())
    assert thrash.serve_args["max_num_seqs"] == 4 and thrash.serve_args["enforce_eager"] is True
    assert max(s.kv_usage or 0 for s in thrash.stats) == 1.0
    assert parse_log((DATA / "captures" / "long_prompts.log").read_text()).serve_args["max_num_batched_tokens"] == 16


def test_v1_gpu_line_with_optional_fields_and_dp_aggregation() -> None:
    line = ("(APIServer pid=1) INFO 11-20 10:00:10 [loggers.py:300] 2 Engines Aggregated: Avg prompt throughput: "
            "120.5 tokens/s, Avg generation throughput: 900.0 tokens/s, Running: 64 reqs, Waiting: 12 reqs, "
            "Deferred: 3 reqs, Preemptions: 5, GPU KV cache usage: 97.5%, Prefix cache hit rate: 41.0%, "
            "External prefix cache hit rate: 80.0%, MM cache hit rate: 10.0%")
    (s,) = parse_log(line).stats
    assert s.engine == "aggregated(2)"
    assert (s.running, s.waiting, s.deferred, s.preemptions) == (64, 12, 3, 5)
    assert (s.kv_device, s.kv_usage, s.prefix_hit_rate) == ("GPU", 0.975, 0.41)


def test_v0_line_cpu_usage_is_swap_not_kv() -> None:
    line = ("INFO 05-01 10:00:00 metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
            "12.3 tokens/s, Running: 3 reqs, Swapped: 1 reqs, Pending: 2 reqs, GPU KV cache usage: 45.0%, "
            "CPU KV cache usage: 90.0%.")
    (s,) = parse_log(line).stats
    assert s.v0_format and (s.running, s.waiting) == (3, 2)
    assert (s.kv_device, s.kv_usage) == ("GPU", 0.45)


def test_startup_capacity_lines_old_and_new() -> None:
    new = parse_log("INFO [kv_cache_utils.py:1170] GPU KV cache size: 1,234,560 tokens, Maximum concurrency for "
                    "32,768 tokens per request: 37.68x")
    assert (new.kv_cache_tokens, new.max_concurrency, new.max_concurrency_len) == (1234560, 37.68, 32768)
    old = parse_log("INFO [kv_cache_utils.py:700] GPU KV cache size: 99,000 tokens\n"
                    "INFO [kv_cache_utils.py:704] Maximum concurrency for 4,096 tokens per request: 24.17x\n"
                    "INFO [executor_base.py:1] # GPU blocks: 6187, # CPU blocks: 2048\n"
                    "INFO [gpu_worker.py:1] Available KV cache memory: 61.73 GiB")
    assert (old.kv_cache_tokens, old.max_concurrency, old.gpu_blocks, old.kv_memory_gib) == (99000, 24.17, 6187,
                                                                                             61.73)


def test_moe_warning_with_dtype_and_block_shape() -> None:
    facts = parse_log("WARNING [fused_moe.py:880] Using default MoE config. Performance might be sub-optimal! "
                      "Config file not found at ['/v/configs/E=256,N=256,device_name=NVIDIA_B200,dtype=fp8_w8a8,"
                      "block_shape=[128, 128].json']")
    (w,) = facts.moe_default_config
    assert (w.experts, w.n, w.device_name, w.dtype, w.block_shape) == (256, 256, "NVIDIA_B200", "fp8_w8a8", [128, 128])


def test_non_literal_args_fall_back_to_simple_pairs() -> None:
    facts = parse_log("INFO [api_utils.py:286] non-default args: {'model': 'm', 'max_num_seqs': 32, "
                      "'compilation_config': CompilationConfig(level=3), 'tensor_parallel_size': 2}")
    assert facts.serve_args == {"model": "m", "max_num_seqs": 32, "tensor_parallel_size": 2}


def test_access_log_status_classes() -> None:
    facts = parse_log('INFO:     127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 400 Bad Request\n'
                      'INFO:     127.0.0.1:2 - "POST /v1/completions HTTP/1.1" 200 OK\n')
    assert facts.http_status == {"4xx": 1, "2xx": 1}


def test_compilation_while_serving_is_warm_up_but_start_up_compilation_is_not() -> None:
    from vllm_tune.tools.diagnose.timing import warmup_reason

    log = (DATA / "captures" / "overload.log").read_text()
    facts = parse_log(log)
    # the real start-up log mentions torch.compile ("disabling torch.compile") before serving: not warm-up
    assert facts.serving and facts.compile_lines_while_serving == []
    assert warmup_reason(None, facts) is None
    late = log + "(EngineCore pid=1) INFO 12-03 18:45:01 [monitor.py:34] torch.compile takes 41.27 s in total\n"
    facts = parse_log(late)
    assert len(facts.compile_lines_while_serving) == 1
    reason = warmup_reason(None, facts)
    assert reason is not None and "compilation while serving" in reason
