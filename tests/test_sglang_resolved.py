"""SGLang's launch-time defaults per release range (sglwrap.sglang.resolved).

Every expected number below was computed by hand from the cited release's source; the arithmetic is in the
comment (MiB throughout; nvidia-smi totals: RTX 4090 24564, H100 81559, H200 143771, B200 182623).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sglwrap.sglang.resolved import (
    GpuInfo,
    ModelTraits,
    ResolvedServerArgs,
    UnsupportedSGLangVersion,
    resolve_server_args,
    rule_range,
)
from sglwrap.sglang.rules import ALL_RANGES

RTX4090 = GpuInfo(24564, (8, 9), "NVIDIA GeForce RTX 4090")
H100 = GpuInfo(81559, (9, 0), "NVIDIA H100 80GB HBM3")
H200 = GpuInfo(143771, (9, 0), "NVIDIA H200")
B200 = GpuInfo(182623, (10, 0), "NVIDIA B200")
SM120 = GpuInfo(97887, (12, 0), "NVIDIA RTX PRO 6000 Blackwell")
LLAMA = ModelTraits(architectures=("LlamaForCausalLM",))
MLA = ModelTraits(architectures=("DeepseekV3ForCausalLM",), is_mla=True)
VLM = ModelTraits(architectures=("Qwen2VLForConditionalGeneration",), is_multimodal=True)


def r(version: str, gpu: GpuInfo | None = H100, model: ModelTraits | None = LLAMA,
      **given: object) -> ResolvedServerArgs:
    return resolve_server_args(given, version, gpu, model)


# ---- the three target outcomes ----------------------------------------------------------------------------------

def test_0_4_6_on_one_rtx_4090_defaults_to_0_88() -> None:
    # 0.4.6 server_args.py:224-235: 24564 <= 81920 -> TP ladder, tp 1 -> 0.88
    res = r("0.4.6", RTX4090)
    assert res.mem_fraction_static == 0.88
    assert res.mem_fraction_static_source == "default"


def test_0_4_9_on_one_rtx_4090_defaults_to_0_879() -> None:
    # 0.4.9 server_args.py:297-319: 20 GiB <= 24564 < 35 GiB -> reserve (2.8 + 1*1/10) * 1024 = 2969.6;
    # (24564 - 2969.6) / 24564 = 0.87911 -> round 3 -> 0.879
    res = r("0.4.9", RTX4090)
    assert res.mem_fraction_static == 0.879
    assert res.reserved_mib == pytest.approx(2969.6)


def test_0_4_9_on_one_h100_defaults_to_0_874() -> None:
    # 35 GiB <= 81559 < 90 GiB -> reserve (9.5 + 1/2) * 1024 = 10240; (81559 - 10240) / 81559 = 0.87445 -> 0.874
    res = r("0.4.9", H100)
    assert res.mem_fraction_static == 0.874
    assert res.reserved_mib == 10240


# ---- one hand-computed case (at least) per release range --------------------------------------------------------

def test_0_2_15_tp_ladder_and_fixed_capture_list() -> None:
    # 0.2.15 server_args.py:109-119: tp >= 8 -> 0.83; chunked 8192 (:54); model_runner.py:501 [1,2,4] + 8..160/8
    res = r("0.2.15", H100, tp_size=8)
    assert res.mem_fraction_static == 0.83
    assert res.chunked_prefill_size == 8192
    assert res.cuda_graph_bs == (1, 2, 4) + tuple(range(8, 161, 8))
    assert res.cuda_graph_max_bs == 160
    assert res.prefill_cuda_graph is False


def test_0_3_6_small_gpu_quarters_chunked_prefill_and_forces_max_bs_4() -> None:
    # 0.3.6 server_args.py:159-160 tp 8 -> 0.82; :173-176 24564 < 25000: chunked 8192 // 4 = 2048 and max bs = 4,
    # even over the user's --cuda-graph-max-bs 64; capture [1,2,4]
    res = r("0.3.6", RTX4090, tp_size=8, cuda_graph_max_bs=64)
    assert res.mem_fraction_static == 0.82
    assert res.chunked_prefill_size == 2048
    assert res.cuda_graph_max_bs == 4
    assert res.cuda_graph_bs == (1, 2, 4)


def test_0_4_0_ladder_and_small_gpu_defaults() -> None:
    # 0.4.0 server_args.py:161-162 tp 8 -> 0.81; :171-183 24564 < 25000 -> chunked 2048, max bs 8 -> capture [1,2,4,8]
    res = r("0.4.0", RTX4090, tp_size=8)
    assert res.mem_fraction_static == 0.81
    assert (res.chunked_prefill_size, res.cuda_graph_max_bs) == (2048, 8)
    assert res.cuda_graph_bs == (1, 2, 4, 8)


def test_0_4_3_small_gpu_tp4_gets_max_bs_80() -> None:
    # 0.4.3 server_args.py:215-224: < 25000 and tp >= 4 -> 80; capture [1,2,4] + 8..80/8 (13 sizes); ladder tp 4 -> 0.85
    res = r("0.4.3", RTX4090, tp_size=4)
    assert res.cuda_graph_max_bs == 80
    assert res.cuda_graph_bs == (1, 2, 4) + tuple(range(8, 81, 8))
    assert res.mem_fraction_static == 0.85
    # the same launch under 0.4.0 rules (server_args.py:178-183) stays at 8
    assert r("0.4.0", RTX4090, tp_size=4).cuda_graph_max_bs == 8


def test_0_4_6_large_gpu_subtracts_13_gib_and_captures_to_256() -> None:
    # 0.4.6 server_args.py:236-238: 143771 > 81920 -> (143771 - 13312) / 143771 = 130459 / 143771 (not rounded)
    # cuda_graph_runner.py:123-140: [1,2,4,8] + 16..160/8, + 160..256/8 since 143771 > 81920 and dp 1
    res = r("0.4.6", H200)
    assert res.mem_fraction_static == pytest.approx(130459 / 143771)
    assert res.cuda_graph_bs == (1, 2, 4, 8) + tuple(range(16, 257, 8))
    assert res.cuda_graph_max_bs == 256


def test_0_4_9_eagle_adds_2_gib_and_caps_running_requests() -> None:
    # 0.4.9 server_args.py:313-315: 10240 + 2048 = 12288; (81559 - 12288) / 81559 = 0.84933 -> 0.849; :467 mrr 48
    res = r("0.4.9", H100, speculative_algorithm="EAGLE")
    assert res.mem_fraction_static == 0.849
    assert res.max_running_requests == 48


def test_0_4_9_h200_tp2_reserve_and_chunk() -> None:
    # 0.4.9 server_args.py:306-308: 100 GiB <= 143771 < 160 GiB -> (12 + 2/2) * 1024 = 13312;
    # (143771 - 13312) / 143771 = 0.90741 -> 0.907; chunked :336-337 -> 8192
    res = r("0.4.9", H200, tp_size=2)
    assert res.mem_fraction_static == 0.907
    assert res.chunked_prefill_size == 8192


def test_request_pool_size_joins_the_capture_list() -> None:
    # 0.4.6 cuda_graph_runner.py:142-151: max 160 > pool 20 -> += [19, 20], then <= 20: [1,2,4,8,16,19,20]
    assert r("0.4.6", H100, max_running_requests=20).cuda_graph_bs == (1, 2, 4, 8, 16, 19, 20)
    # 0.4.9 cuda_graph_runner.py:165-168: += [20] only
    assert r("0.4.9", H100, max_running_requests=20).cuda_graph_bs == (1, 2, 4, 8, 16, 20)


def test_0_4_10_vlm_factor_replaces_the_flat_0_90() -> None:
    # 0.4.9 server_args.py:329: 0.874 * 0.90 = 0.7866; 0.4.10 :1946-1986 with a ViT-L-sized tower: 0.874 * 0.95 = 0.8303
    assert r("0.4.9", H100, VLM).mem_fraction_static == pytest.approx(0.874 * 0.90)
    assert r("0.4.10", H100, VLM).mem_fraction_static == pytest.approx(0.874 * 0.95)


def test_0_5_2_standalone_reserves_6_gib() -> None:
    # 0.5.2 server_args.py:487-492: 10240 + 6144 = 16384; (81559 - 16384) / 81559 = 0.79912 -> 0.799
    # 0.5.1 (0.4.10 rules): 10240 + 2048 = 12288 -> 0.849
    assert r("0.5.2", H100, speculative_algorithm="STANDALONE").mem_fraction_static == 0.799
    assert r("0.5.1", H100, speculative_algorithm="STANDALONE").mem_fraction_static == 0.849


def test_0_5_3_term_by_term_reserve() -> None:
    # 0.5.3 server_args.py:597-605: H100 -> chunked 8192, max bs 256; :637-676 reserve 512 + 8192*1.5 + 256*2
    # + 1*1/8*1024 = 512 + 12288 + 512 + 128 = 13440; (81559 - 13440) / 81559 = 0.83521 -> 0.835
    res = r("0.5.3", H100)
    assert res.reserved_mib == 13440
    assert res.mem_fraction_static == 0.835
    # :685-713 [1,2,4,8,12] + 16..256/8
    assert res.cuda_graph_bs == (1, 2, 4, 8, 12) + tuple(range(16, 257, 8))


def test_0_5_3_rtx_4090_bucket() -> None:
    # 0.5.3 server_args.py:574-584: 20-35 GiB -> chunked 2048, max bs 16 at tp 1;
    # reserve 512 + 2048*1.5 + 16*2 + 128 = 3744 (no 10 GiB floor below 60 GiB); (24564-3744)/24564 = 0.84758 -> 0.848
    res = r("0.5.3", RTX4090)
    assert (res.chunked_prefill_size, res.cuda_graph_max_bs) == (2048, 16)
    assert res.mem_fraction_static == 0.848


def test_0_5_4_piecewise_graph_is_opt_in_and_unreserved() -> None:
    # 0.5.4 server_args.py:841-858 with the field default max 4096: 4..32/4 (8) + 48..256/16 (14) + 288..512/32 (8)
    # + 640..4096/128 (28) = 58 sizes; no reserve term yet -> still 0.835
    off = r("0.5.4", H100)
    on = r("0.5.4", H100, enable_piecewise_cuda_graph=True)
    assert off.prefill_cuda_graph is False and on.prefill_cuda_graph is True
    assert len(on.prefill_graph_sizes) == 58 and on.prefill_graph_sizes[-1] == 4096
    assert on.mem_fraction_static == 0.835


def test_0_5_5_rtx_4090_max_bs_24_and_eagle() -> None:
    # 0.5.5 server_args.py:707-717: max bs 24; reserve 512 + 3072 + 48 + 128 = 3760; 20804 / 24564 = 0.84693 -> 0.847
    assert r("0.5.5", RTX4090).mem_fraction_static == 0.847
    # EAGLE: + 2048 -> 5808; 18756 / 24564 = 0.76355 -> 0.764; capture (:847-853) 1..8 + 10..24/2 = 16 sizes
    res = r("0.5.5", RTX4090, speculative_algorithm="EAGLE")
    assert res.mem_fraction_static == 0.764
    assert res.cuda_graph_bs == tuple(range(1, 9)) + tuple(range(10, 25, 2))


def test_0_5_6_piecewise_reserves_a_quarter_of_max_tokens() -> None:
    # 0.5.6 server_args.py:855-857: 3760 + 4096 // 4 = 4784; (24564 - 4784) / 24564 = 0.80524 -> 0.805
    assert r("0.5.6", RTX4090, enable_piecewise_cuda_graph=True).mem_fraction_static == 0.805


def test_0_5_7_piecewise_reserves_an_eighth_of_chunked_prefill() -> None:
    # 0.5.7 server_args.py:900-903 max tokens = chunked 2048; :943-945 3760 + 2048 // 8 = 4016;
    # (24564 - 4016) / 24564 = 0.83651 -> 0.837
    assert r("0.5.7", RTX4090, enable_piecewise_cuda_graph=True).mem_fraction_static == 0.837


def test_0_5_8_piecewise_reserves_8_mib_per_size() -> None:
    # 0.5.8 server_args.py:1069-1087 up to 2048: 8 + 14 + 8 + 640..1024/64 (7) + 1280..2048/256 (4) = 41 sizes;
    # 3760 + 41*8 = 4088; (24564 - 4088) / 24564 = 0.83358 -> 0.834
    res = r("0.5.8", RTX4090, enable_piecewise_cuda_graph=True)
    assert len(res.prefill_graph_sizes) == 41
    assert res.mem_fraction_static == 0.834


def test_0_5_9_prefill_sizes_start_at_576() -> None:
    # 0.5.9 server_args.py:1109-1127 up to 2048: 8 + 14 + 8 + 576..1024/64 (8) + 4 = 42 -> 336; 3760 + 336 = 4096;
    # (24564 - 4096) / 24564 = 0.83325 -> 0.833
    res = r("0.5.9", RTX4090, enable_piecewise_cuda_graph=True)
    assert len(res.prefill_graph_sizes) == 42
    assert res.mem_fraction_static == 0.833


def test_0_5_10_piecewise_default_on_and_eagle_turns_it_off() -> None:
    # 0.5.10: default on (:1078-1139); up to 8192: 4..32/4 (8) + 48..256/16 (14) + 288..512/32 (8) + 576..1024/64 (8)
    # + 1280..4096/256 (12) + 4608..8192/512 (8) = 58 -> 58*8 = 464; 13440 + 464 = 13904;
    # (81559 - 13904) / 81559 = 0.82952 -> 0.830
    res = r("0.5.10", H100)
    assert res.prefill_cuda_graph is True and len(res.prefill_graph_sizes) == 58
    assert res.mem_fraction_static == 0.830
    # EAGLE: piecewise off (rule 2), spec reserve now 4 GiB: 13440 + 4096 = 17536; 64023 / 81559 = 0.78499 -> 0.785
    eagle = r("0.5.10", H100, speculative_algorithm="EAGLE")
    assert eagle.prefill_cuda_graph is False
    assert eagle.mem_fraction_static == 0.785
    # spec capture (:1360-1367) up to 256: 1..8 (8) + 10..32/2 (12) + 40..64/4 (7) + 72..256/8 (24) = 51
    assert len(eagle.cuda_graph_bs) == 51 and eagle.max_running_requests == 48


def test_0_5_11_speculative_decoding_keeps_the_piecewise_graph() -> None:
    # 0.5.11 server_args.py:1194-1261 has no speculative-decoding rule: prefill graph on, 13440 + 464 = 13904
    # (>= 10 GiB floor), then + 4096 (EAGLE, :1470-1475) = 18000; (81559 - 18000) / 81559 = 0.77930 -> 0.779
    res = r("0.5.11", H100, speculative_algorithm="EAGLE")
    assert res.prefill_cuda_graph is True
    assert res.mem_fraction_static == 0.779


def test_0_5_10_mla_prefill_graph_reserves_1_5_gib() -> None:
    # 0.5.10 server_args.py:1305-1311: 13440 + 1536 = 14976; (81559 - 14976)/81559 = 0.81638 -> 0.816
    assert r("0.5.10", H100, MLA).mem_fraction_static == 0.816


def test_0_5_12_default_attention_backend_by_capability() -> None:
    # 0.5.12 server_args.py:2579-2646: Hopper -> fa3; SM100 -> trtllm_mha, whose page sizes force 64;
    # SM120 -> flashinfer; MLA on SM100 -> flashinfer
    assert r("0.5.12", H100).attention_backend == "fa3"
    b200 = r("0.5.12", B200)
    assert (b200.attention_backend, b200.page_size) == ("trtllm_mha", 64)
    assert r("0.5.12", SM120).attention_backend == "flashinfer"
    assert r("0.5.12", B200, MLA).attention_backend == "flashinfer"
    # 0.5.3 picks it in ModelRunner at load: not known here
    assert r("0.5.3", H100).attention_backend is None


def test_attention_default_moves_into_server_args_at_0_5_5() -> None:
    # 0.5.4: chosen in ModelRunner at load (model_runner.py:545-590) -> unknown here
    assert r("0.5.4", H100).attention_backend is None
    # 0.5.5 server_args.py:1144-1150: fa3 on Hopper only for utils/common.py:2650-2667's architectures
    assert r("0.5.5", H100).attention_backend == "fa3"
    assert r("0.5.5", H100, ModelTraits(architectures=("MistralForCausalLM",))).attention_backend == "flashinfer"
    # no trtllm_mha default before 0.5.7 (:1531-1539); 0.5.8 drops the architecture list
    assert r("0.5.5", B200).attention_backend == "flashinfer"
    assert (r("0.5.7", B200).attention_backend, r("0.5.7", B200).page_size) == ("trtllm_mha", 64)
    assert r("0.5.8", H100, ModelTraits(architectures=("MistralForCausalLM",))).attention_backend == "fa3"


def test_0_5_13_context_length_clamps_prefill_graphs() -> None:
    # 0.5.13 server_args.py:1580-1585: max 2048 -> 42 sizes -> 336; 13440 + 336 = 13776; 67783/81559 = 0.83109 -> 0.831
    assert r("0.5.13", H100, context_length=2048).mem_fraction_static == 0.831
    # 0.5.17 dropped the clamp: 58 sizes -> 0.830
    assert r("0.5.17", H100, context_length=2048).mem_fraction_static == 0.830


def test_0_5_14_spec_keeps_prefill_graph_and_drops_spec_reserve() -> None:
    # 0.5.14: speculative decoding is not in the tc_piecewise rules; no spec term: 13440 + 464 = 13904 -> 0.830
    res = r("0.5.14", H100, speculative_algorithm="EAGLE")
    assert res.prefill_cuda_graph is True
    assert res.mem_fraction_static == 0.830


def test_0_5_15_decode_term_needs_decode_graphs() -> None:
    # 0.5.15 server_args.py:3639-3643: --disable-cuda-graph drops 256*2 and the prefill term:
    # 512 + 12288 + 128 = 12928; (81559 - 12928) / 81559 = 0.84149 -> 0.841
    assert r("0.5.15", H100, disable_cuda_graph=True).mem_fraction_static == 0.841
    # 0.5.14 still counts 256*2: 13440 -> 0.835
    assert r("0.5.14", H100, disable_cuda_graph=True).mem_fraction_static == 0.835


def test_0_5_17_mla_disables_breakable_prefill_graph() -> None:
    # 0.5.17 breakable rules: MLA (non-DSA) -> off -> 13440 -> 0.835; 0.5.18 keeps it on: 13440 + 1536 -> 0.816
    assert r("0.5.17", H100, MLA).prefill_cuda_graph is False
    assert r("0.5.17", H100, MLA).mem_fraction_static == 0.835
    assert r("0.5.18", H100, MLA).mem_fraction_static == 0.816


def test_0_5_19_pipeline_parallel_prefill_graph_is_opt_in() -> None:
    # 0.5.19 cuda_graph_hook: pp > 1 -> prefill off; 512 + 12288 + 512 + 1*2/8*1024 = 13568;
    # (81559 - 13568) / 81559 = 0.83364 -> 0.834; 0.5.18: + 464 = 14032 -> 0.82796 -> 0.828
    assert r("0.5.19", H100, pp_size=2).mem_fraction_static == 0.834
    assert r("0.5.18", H100, pp_size=2).mem_fraction_static == 0.828


def test_0_5_20_rtx_4090_bucket_and_no_gpu_fallback() -> None:
    # 0.5.20 memory_hook.py:101-117: 4096 / 48; 512 + 6144 + 96 + 128 = 6880; prefill up to 4096: 50 sizes -> 400;
    # 7280; (24564 - 7280) / 24564 = 0.70363 -> 0.704
    res = r("0.5.20", RTX4090)
    assert (res.chunked_prefill_size, res.cuda_graph_max_bs) == (4096, 48)
    assert res.mem_fraction_static == 0.704
    # 0.5.19 still 2048 / 24: 512 + 3072 + 48 + 128 + 42*8 = 4096 -> 0.833
    assert r("0.5.19", RTX4090).mem_fraction_static == 0.833
    # no GPU: 0.95 from 0.5.20 (memory_hook.py:324-328), 0.88 before
    assert r("0.5.20", None).mem_fraction_static == 0.95
    assert r("0.5.19", None).mem_fraction_static == 0.88
    assert r("0.5.19", None).chunked_prefill_size == 4096


def test_0_5_22_max_running_requests_caps_default_max_bs() -> None:
    # 0.5.22 memory_hook.py:182-188: 256 -> 16; 512 + 12288 + 32 + 128 + 464 = 13424; 68135/81559 = 0.83540 -> 0.835
    res = r("0.5.22", H100, max_running_requests=16)
    assert res.cuda_graph_max_bs == 16
    assert res.mem_fraction_static == 0.835
    assert r("0.5.21", H100, max_running_requests=16).cuda_graph_max_bs == 256


def test_0_5_22_dp_attention_on_h200() -> None:
    # tp 8, dp 8 + DP attention, H200: max bs 512 (tp >= 4); 512 + 12288 + 1024 + 8/8*1024 = 14848;
    # + 512*8*3 = 12288 + 512*8*1.5 = 6144 (max bs > 300) -> 33280; + 58*8 = 464 -> 33744;
    # (143771 - 33744) / 143771 = 0.76529 -> 0.765; chunked per rank 8192 // 8 = 1024
    res = r("0.5.22", H200, tp_size=8, dp_size=8, enable_dp_attention=True)
    assert res.reserved_mib == 33744
    assert res.mem_fraction_static == 0.765
    assert res.chunked_prefill_size == 1024
    assert "dp_attention_side_effects" in res.auto_enabled


def test_0_5_23_mla_prefill_graph_up_to_8192() -> None:
    # 0.5.23 memory_hook.py:233-238: MLA prefill max min(8192, 8192) -> 58 sizes; 0.5.22 capped at 2048 -> 42
    assert len(r("0.5.23", H100, MLA).prefill_graph_sizes) == 58
    assert len(r("0.5.22", H100, MLA).prefill_graph_sizes) == 42
    # reserve 13440 + 1536 = 14976 either way -> 0.816
    assert r("0.5.23", H100, MLA).mem_fraction_static == 0.816


def test_memory_defaults_view() -> None:
    # the data view gives the same three target numbers without touching the full record
    from sglwrap.sglang.resolved import memory_defaults

    assert memory_defaults("0.4.6", 24564).mem_fraction_static == 0.88
    assert memory_defaults("0.4.9", 24564).mem_fraction_static == 0.879
    view = memory_defaults("0.4.9", 81559)
    assert (view.mem_fraction_static, view.chunked_prefill_size, view.reserved_mib) == (0.874, 8192, 10240)


def test_0_4_1_small_gpu_tp4_gets_max_bs_80() -> None:
    # 0.4.1 server_args.py (as 0.4.3 :209-214): < 25000 MiB and tp >= 4 -> cuda_graph_max_bs 80; the runner's
    # list [1, 2, 4, 8, ..., 160] cut at 80 ends at 80
    assert r("0.4.1", RTX4090, tp_size=4).cuda_graph_max_bs == 80
    assert r("0.4.0", RTX4090, tp_size=4).cuda_graph_max_bs == 8


def test_0_4_4_eagle_keeps_chunked_prefill_and_captures_1_to_32() -> None:
    # 0.4.4 server_args.py:280-284: EAGLE -> 32 requests, padding off, chunked prefill untouched (0.4.3 set -1);
    # cuda_graph_runner.py:114-120: speculative -> range(1, 33)
    res = r("0.4.4", H100, speculative_algorithm="EAGLE")
    assert (res.chunked_prefill_size, res.max_running_requests) == (8192, 32)
    assert res.cuda_graph_bs == tuple(range(1, 33))
    assert r("0.4.3", H100, speculative_algorithm="EAGLE").chunked_prefill_size == -1


def test_0_4_5_dp_attention_divides_by_dp_size_and_spec_list_is_sparser() -> None:
    # 0.4.5 server_args.py:304: 8192 // dp_size 4 = 2048 (0.4.4 halves: 4096)
    assert r("0.4.5", H100, tp_size=4, dp_size=4, enable_dp_attention=True).chunked_prefill_size == 2048
    assert r("0.4.4", H100, tp_size=4, dp_size=4, enable_dp_attention=True).chunked_prefill_size == 4096
    # cuda_graph_runner.py:122-124: 1..8 (8) + 10..32/2 (12) + 40..152/16 (8) = 28 sizes, largest 152
    res = r("0.4.5", H100, speculative_algorithm="EAGLE")
    assert (len(res.cuda_graph_bs), res.cuda_graph_max_bs, res.max_running_requests) == (28, 152, 48)


def test_0_4_7_big_gpu_takes_the_smaller_of_two_fractions() -> None:
    # 0.4.7 server_args.py:262-281: 143771 > 81920 -> 0.88; > 96 GiB -> min(0.88 + 49152 * 0.12 / 143771,
    # (143771 - 18432) / 143771) = min(0.92103, 0.87180)
    res = r("0.4.7", H200)
    assert res.mem_fraction_static == pytest.approx(125339 / 143771)
    assert res.chunked_prefill_size == 8192
    # with speculative decoding the reserve is 20 GiB: (143771 - 20480) / 143771
    assert r("0.4.7", H200, speculative_algorithm="EAGLE").mem_fraction_static == pytest.approx(123291 / 143771)


def test_0_4_7_speculative_decoding_scales_the_ladder_and_b200_is_flat() -> None:
    # 0.4.7 server_args.py:282-283: <= 96 GiB with speculative decoding: 0.88 x 0.95
    assert r("0.4.7", H100, speculative_algorithm="EAGLE").mem_fraction_static == pytest.approx(0.836)
    assert r("0.4.7", H100).mem_fraction_static == 0.88
    # :260-261 and :287-288: above 180 GB 0.79 and 16384 chunked prefill
    res = r("0.4.7", B200)
    assert (res.mem_fraction_static, res.chunked_prefill_size) == (0.79, 16384)
    # cuda_graph_runner.py:150-153: 182623 > 96 GiB adds 160..256/8 and > 180 GB 256..512/16 -> max 512
    assert res.cuda_graph_max_bs == 512


def test_0_4_8_already_uses_the_bucket_reserve_without_a_vlm_factor() -> None:
    # 0.4.8 server_args.py:274-313: 81559 < 90 GiB -> reserve (9.5 + 1/2) GiB = 10240; round(71319 / 81559, 3)
    assert r("0.4.8", H100).mem_fraction_static == 0.874
    # no multimodal factor in 0.4.8's ServerArgs (0.4.9 added x 0.90 there)
    assert r("0.4.8", H100, VLM).mem_fraction_static == 0.874
    assert r("0.4.9", H100, VLM).mem_fraction_static == pytest.approx(0.874 * 0.90)


def test_post_releases_that_carried_backports_take_their_own_rules() -> None:
    # 0.5.4.post2 has 0.5.5's bucket row (20-35 GiB: max bs 24 at tp < 4, not 16) and its ServerArgs-side backend
    res = r("0.5.4.post2", RTX4090)
    assert (res.cuda_graph_max_bs, r("0.5.4", RTX4090).cuda_graph_max_bs) == (24, 16)
    assert res.attention_backend == "flashinfer"
    # 0.5.6.post1 picks trtllm_mha on SM100 as 0.5.7 does (0.5.6: flashinfer)
    assert (r("0.5.6.post1", B200).attention_backend, r("0.5.6", B200).attention_backend) == ("trtllm_mha",
                                                                                               "flashinfer")
    # 0.4.5.post3 has 0.4.6's 13 GiB rule above 81920 MiB: (97871 - 13312) / 97871 on an H20; its runner extends the
    # list to 256 above 81920 MiB with DP attention too (0.4.6: dp_size 1 only)
    h20 = GpuInfo(97871, (9, 0), "NVIDIA H20")
    assert r("0.4.5.post3", h20).mem_fraction_static == pytest.approx(84559 / 97871)
    assert r("0.4.5.post3", h20, tp_size=2, dp_size=2, enable_dp_attention=True).cuda_graph_max_bs == 256
    # 0.4.3.post3 has 0.4.4's EAGLE handling (chunked prefill kept, 32 requests); 0.4.3.post2 still sets -1
    assert r("0.4.3.post3", H100, speculative_algorithm="EAGLE").chunked_prefill_size == 8192
    assert r("0.4.3.post2", H100, speculative_algorithm="EAGLE").chunked_prefill_size == -1
    # 0.4.4.post1 divides chunked prefill by dp_size under DP attention: 8192 // 4 (0.4.4 halves: 4096)
    dp4 = {"tp_size": 4, "dp_size": 4, "enable_dp_attention": True}
    assert (r("0.4.4.post1", H100, **dp4).chunked_prefill_size, r("0.4.4", H100, **dp4).chunked_prefill_size) == (
        2048, 4096)
    # 0.4.4.post4 has 0.4.5's sparser speculative list: 28 sizes up to 152, 48 requests
    res = r("0.4.4.post4", H100, speculative_algorithm="EAGLE")
    assert (len(res.cuda_graph_bs), res.cuda_graph_max_bs, res.max_running_requests) == (28, 152, 48)
    # 0.3.5.post2 server_args.py:157-174: 0.2.15's ladder (0.83 at TP 8) but 0.3.6's small-GPU rule:
    # 24564 < 25000 -> 8192 // 4 = 2048 and graph max bs 4 ([1, 2, 4] captured); 0.3.5.post1 kept 8192 / 160
    res = r("0.3.5.post2", RTX4090, tp_size=8)
    assert (res.mem_fraction_static, res.chunked_prefill_size, res.cuda_graph_max_bs) == (0.83, 2048, 4)
    assert r("0.3.5.post1", RTX4090).chunked_prefill_size == 8192
    # 0.4.6.post2: above 96 GiB min(0.88 + 49152 x 0.12 / 143771, (143771 - 18432) / 143771); 0.4.6 took 13 GiB
    assert r("0.4.6.post2", H200).mem_fraction_static == pytest.approx(125339 / 143771)
    assert r("0.4.6", H200).mem_fraction_static == pytest.approx(130459 / 143771)
    # its runner extends the list to 256 above 96 GiB even with DP attention (0.4.6 only at dp_size 1)
    dp = {"tp_size": 2, "dp_size": 2, "enable_dp_attention": True}
    assert (r("0.4.6.post2", H200, **dp).cuda_graph_max_bs, r("0.4.6", H200, **dp).cuda_graph_max_bs) == (256, 160)
    # 0.4.7.post1 has 0.4.8's bucket reserve: round((81559 - 10240) / 81559, 3)
    assert r("0.4.7.post1", H100).mem_fraction_static == 0.874
    # 0.4.9.post3 has adjust_mem_fraction_for_vlm (ViT-size factor) instead of 0.4.9's flat x 0.90
    qwen25vl = ModelTraits(architectures=("Qwen2_5_VLForConditionalGeneration",), is_multimodal=True,
                           vision_hidden_size=1280)
    assert r("0.4.9.post3", H100, qwen25vl).mem_fraction_static == pytest.approx(0.874 * 0.95 * 0.94375)
    assert r("0.4.9.post2", H100, qwen25vl).mem_fraction_static == pytest.approx(0.874 * 0.90)


def test_vlm_factor_reads_num_hidden_layers_as_the_config_spells_it() -> None:
    # Qwen2.5-VL: vision_config has depth 32 but no num_hidden_layers -> SGLang takes 24 (0.5.2
    # server_args.py:2524-2525); ratio 24 x 1280^2 / (24 x 1024^2) = 1.5625 -> 0.95 x (1 - 0.05625)
    qwen25vl = ModelTraits(architectures=("Qwen2_5_VLForConditionalGeneration",), is_multimodal=True,
                           vision_hidden_size=1280)
    assert r("0.5.2", H100, qwen25vl).mem_fraction_static == pytest.approx(0.874 * 0.95 * 0.94375)
    assert round(r("0.5.2", H100, qwen25vl).mem_fraction_static, 4) == 0.7836  # the log's value


# ---- range bookkeeping ------------------------------------------------------------------------------------------

HAND_CASE_RANGES = {"0.2.15", "0.3.5.post2", "0.3.6", "0.4.0", "0.4.1", "0.4.3.post3", "0.4.4.post1", "0.4.4.post4",
                    "0.4.5.post3", "0.4.6", "0.4.6.post2", "0.4.7", "0.4.7.post1", "0.4.9", "0.4.9.post3", "0.4.10", "0.5.2", "0.5.3",
                    "0.5.4", "0.5.4.post2", "0.5.6.post1",
                    "0.5.5", "0.5.6", "0.5.7", "0.5.8", "0.5.9", "0.5.10", "0.5.11", "0.5.12", "0.5.13", "0.5.14",
                    "0.5.15", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.22", "0.5.23"}


def test_every_range_has_a_hand_computed_case_above() -> None:
    assert {rg.first for rg in ALL_RANGES} == HAND_CASE_RANGES


def test_each_era_holds_the_ranges_between_its_first_release_and_the_next_eras() -> None:
    # rule_range imports only the era a version falls in: that is right only while the eras partition the ranges
    from packaging.version import Version

    from sglwrap.sglang.rules import ERAS, OLDEST, era_ranges

    firsts = [Version(first) for first, _ in ERAS]
    assert firsts == sorted(firsts) and OLDEST == ERAS[0][0]
    for i, (first, era) in enumerate(ERAS):
        ranges = era_ranges(era)
        assert ranges[0].first == first
        starts = [Version(rg.first) for rg in ranges]
        assert starts == sorted(starts)
        if i + 1 < len(ERAS):
            assert starts[-1] < firsts[i + 1]
    assert [rg.first for rg in ALL_RANGES] == [rg.first for _, era in ERAS for rg in era_ranges(era)]


def test_a_05x_release_imports_no_older_era() -> None:
    import subprocess
    import sys

    code = ("import sys; from sglwrap.sglang.resolved import rule_range; rule_range('0.5.23'); "
            "print(sorted(m for m in sys.modules if m.startswith('sglwrap.sglang.rules.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "rules.terms" in out and "rules.legacy" not in out and "rules.bucket_reserve" not in out


@pytest.mark.parametrize(("version", "first"), [
    ("0.3.0", "0.2.15"), ("0.3.5", "0.2.15"), ("0.4.1", "0.4.1"), ("0.4.3", "0.4.1"), ("0.4.8", "0.4.7.post1"), ("0.4.7.post1", "0.4.7.post1"), ("0.4.9.post6", "0.4.9.post3"), ("0.5.1", "0.4.10"),
    ("0.5.11", "0.5.11"), ("0.5.16", "0.5.15"), ("0.5.21", "0.5.20"), ("0.5.24", "0.5.23"), ("0.5.9rc1", "0.5.9"),
    ("0.4.6.post1", "0.4.6"), ("0.4.6.post2", "0.4.6.post2"), ("0.4.6.post5", "0.4.6.post2"),
])
def test_versions_between_reads_take_their_range(version: str, first: str) -> None:
    assert rule_range(version).first == first


def test_unread_version_is_noted() -> None:
    assert any("0.5.24 was not read" in n for n in r("0.5.24").notes)
    assert not any("was not read" in n for n in r("0.5.11").notes)


@pytest.mark.parametrize("version", ["0.2.9", "0.1.14", "not-a-version"])
def test_older_or_bad_version_is_a_clear_error(version: str) -> None:
    with pytest.raises(UnsupportedSGLangVersion, match="sglang"):
        r(version)


def test_user_values_win_and_are_sourced_as_user() -> None:
    res = r("0.4.9", H100, mem_fraction_static=0.7, chunked_prefill_size=4096, cuda_graph_max_bs=64)
    assert (res.mem_fraction_static, res.mem_fraction_static_source, res.reserved_mib) == (0.7, "user", None)
    assert res.chunked_prefill_size == 4096
    assert res.cuda_graph_max_bs == 64
    assert res.sources["mem_fraction_static"] == "user"
    assert res.sources["chunked_prefill_size"] == "user"
    assert r("0.4.9", H100).sources["mem_fraction_static"].startswith("sglang 0.4.9 server_args.py:")


def test_0_5_23_decode_flag_spelling_is_accepted() -> None:
    assert r("0.5.23", H100, cuda_graph_max_bs_decode=128).cuda_graph_max_bs == 128


def test_custom_all_reduce_is_auto_for_tp_gt_1_only() -> None:
    assert "custom_all_reduce" in r("0.5.23", H100, tp_size=2).auto_enabled
    assert "custom_all_reduce" not in r("0.5.23", H100).auto_enabled
    assert "custom_all_reduce" not in r("0.5.23", H100, tp_size=2, disable_custom_all_reduce=True).auto_enabled


def test_flashinfer_allreduce_fusion_auto_enable() -> None:
    qwen_moe = ModelTraits(architectures=("Qwen3MoeForCausalLM",))
    assert "flashinfer_allreduce_fusion" in r("0.5.23", H200, qwen_moe, tp_size=4).auto_enabled
    # not on SM120, not at tp 1 (0.5.10+), not with DP attention
    assert "flashinfer_allreduce_fusion" not in r("0.5.23", SM120, qwen_moe, tp_size=4).auto_enabled
    assert "flashinfer_allreduce_fusion" not in r("0.5.23", H200, qwen_moe).auto_enabled
    assert "flashinfer_allreduce_fusion" not in r("0.5.23", H200, qwen_moe, tp_size=4, dp_size=4,
                                                  enable_dp_attention=True).auto_enabled


# ---- 0.5.23 equals the memory accountant's own 0.5.23 logic (checked against real logs) ----------------------------
# sglwrap/memory/defaults.py at commit ee71f02, before it was wired to sglwrap.sglang.resolved (d1b394b), restated
# here as the reference: a separate implementation of memory_hook.py:47-414 that was checked against real logs.

def _accountant_ee71f02(gpu: float | None, *, tp: int = 1, pp: int = 1, attn_dp: int = 1, cps: int | None = None,
                        max_bs: int | None = None, mrr: int | None = None, decode_graph: bool = True,
                        prefill_graph: bool = True, is_mla: bool = False) -> tuple[int, int, int, float, float]:
    if gpu is None:
        cps_d, bs_d = 4096, 160
    elif gpu < 20 * 1024:
        cps_d, bs_d = 2048, 8
    elif gpu < 35 * 1024:
        cps_d, bs_d = 4096, 48 if tp < 4 else 160
    elif gpu < 60 * 1024:
        cps_d, bs_d = 4096, 32 if tp < 4 else 160
    elif gpu < 160 * 1024:
        cps_d, bs_d = 8192, 256 if tp < 4 else 512
    else:
        cps_d, bs_d = 16384, 512
    c = cps if cps is not None else cps_d
    b = max_bs if max_bs is not None else bs_d
    if max_bs is None and mrr is not None:
        b = min(b, mrr)
    pmax = min(8192, c) if is_mla else c
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, pmax + 1, 512)))
    n_prefill = len([x for x in sizes if x <= pmax]) if c > 0 else 0
    reserved = 512 + (max(c, 2048) if c > 0 else 2048) * 1.5 + tp * pp / 8 * 1024
    if decode_graph:
        reserved += b * 2
    if attn_dp > 1:
        reserved += b * attn_dp * 3 + (b * attn_dp * 1.5 if b > 300 else 0)
    if prefill_graph:
        reserved += 1536 if is_mla else 8 * n_prefill
    if gpu is not None and gpu > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    f = round((gpu - reserved) / gpu, 3) if gpu else 0.95
    return c, b, n_prefill, f, reserved


@pytest.mark.parametrize(("given", "gpu", "ref"), [
    ({}, H100, {}),
    ({}, RTX4090, {}),
    ({"tp_size": 8}, H200, {"tp": 8}),
    ({"tp_size": 2, "max_running_requests": 16}, H200, {"tp": 2, "mrr": 16}),
    ({"chunked_prefill_size": 4096, "cuda_graph_max_bs_decode": 64}, H100, {"cps": 4096, "max_bs": 64}),
    ({"disable_cuda_graph": True}, H100, {"decode_graph": False, "prefill_graph": False}),
    ({"tp_size": 8, "dp_size": 8, "enable_dp_attention": True}, H200, {"tp": 8, "attn_dp": 8}),
    ({"tp_size": 4, "attn_dp_size": 2}, B200, {"tp": 4, "attn_dp": 2}),
    ({"pp_size": 2}, B200, {"pp": 2, "prefill_graph": False}),  # 0.5.23 cuda_graph_hook.py:146-162: pp > 1 -> off
    ({}, GpuInfo(16376, (8, 9)), {}),
    ({}, None, {}),
])
def test_0_5_23_matches_the_accountants_reference(given: dict[str, object], gpu: GpuInfo | None,
                                                   ref: dict[str, object]) -> None:
    mine = resolve_server_args(given, "0.5.23", gpu, LLAMA)
    total = None if gpu is None else gpu.total_mib
    cps, max_bs, n_prefill, frac, reserved = _accountant_ee71f02(total, **ref)  # type: ignore[arg-type]
    assert mine.mem_fraction_static == pytest.approx(frac)
    assert mine.reserved_mib == (None if gpu is None else reserved)
    assert mine.cuda_graph_max_bs == (max_bs if mine.decode_cuda_graph else 0)
    assert len(mine.prefill_graph_sizes) == (n_prefill if mine.prefill_cuda_graph else 0)
    attn_dp = int(ref.get("attn_dp", 1))  # type: ignore[call-overload]
    assert mine.chunked_prefill_size == cps // attn_dp


def test_0_5_23_mla_matches_the_accountants_reference() -> None:
    # DeepSeek-V3 (MLA, text) at tp 8 on H200; Kimi-K2.5 (MLA, multimodal, on 0.5.23's breakable allowlist)
    kimi = ModelTraits(architectures=("KimiK25ForConditionalGeneration",), is_mla=True, is_multimodal=True)
    for model in (MLA, kimi):
        mine = resolve_server_args({"tp_size": 8}, "0.5.23", H200, model)
        _, _, _, frac, reserved = _accountant_ee71f02(H200.total_mib, tp=8, is_mla=True)
        assert mine.reserved_mib == reserved
        factor = 0.95 if model.is_multimodal else 1.0  # ViT-L-sized tower when vision_params is unknown
        assert mine.mem_fraction_static == pytest.approx(frac * factor)


def test_multimodal_prefill_graph_follows_the_release_allowlist() -> None:
    # 0.5.23 cuda_graph_hook.py:230-240: multimodal -> breakable prefill graph off unless on the allowlist
    # (configs/model_config.py:2501-2516); Qwen2-VL is not, Kimi-K2.5 is (and was not in 0.5.16: off for all VLMs)
    kimi = ModelTraits(architectures=("KimiK25ForConditionalGeneration",), is_multimodal=True)
    assert r("0.5.23", H100, VLM).prefill_cuda_graph is False
    assert r("0.5.23", H100, kimi).prefill_cuda_graph is True
    assert r("0.5.16", H100, kimi).prefill_cuda_graph is False


# ---- differential: the installed SGLang (0.5.23) computing its own defaults on CPU -------------------------------

_PROBE = textwrap.dedent("""
    import json, sys
    MEM = {"v": None}
    import sglang.srt.utils.common as common
    common.get_device_memory_capacity = lambda device=None: MEM["v"]
    import sglang.srt.arg_groups.memory_hook as mh
    mh.get_device_memory_capacity = lambda device=None: MEM["v"]
    import sglang.srt.model_executor.cuda_graph_config as cgc
    cgc.default_prefill_backend = lambda: cgc.Backend.BREAKABLE  # what is_cuda() would pick on a GPU host
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.arg_groups.overrides import resolved_view
    out = []
    for path, mem, kw in json.loads(sys.argv[1]):
        MEM["v"] = mem
        sa = ServerArgs(model_path=path, device="cuda", **kw)
        sa.resolve_once()
        rv = resolved_view(sa)
        cg = rv.cuda_graph_config
        out.append({"mfs": rv.mem_fraction_static, "cps": rv.chunked_prefill_size, "max_bs": cg.decode.max_bs,
                    "bs": cg.decode.bs, "decode_on": cg.decode.backend != "disabled",
                    "prefill_on": cg.prefill.backend != "disabled", "prefill_bs": cg.prefill.bs})
    print("RESULT " + json.dumps(out))
""")

DEEPSEEK_V3 = Path(__file__).resolve().parents[1] / "sglwrap" / "data" / "models" / "DeepSeek-V3"
_DIFF_CASES: list[tuple[str, GpuInfo, dict[str, object]]] = [
    ("llama", H100, {}), ("llama", RTX4090, {}), ("llama", H200, {"tp_size": 8}),
    ("llama", GpuInfo(49140, (8, 9)), {"max_running_requests": 16}), ("llama", H100, {"chunked_prefill_size": 2048}),
    ("llama", B200, {}), ("llama", GpuInfo(16376, (8, 9)), {}), ("llama", H100, {"disable_cuda_graph": True}),
    ("mla", H100, {}), ("mla", H200, {"tp_size": 8}),
]


@pytest.mark.real_sglang
def test_0_5_23_equals_the_installed_sglang(tmp_path: Path) -> None:
    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
        "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}))
    paths = {"llama": str(model), "mla": str(DEEPSEEK_V3)}
    cases = [[paths[m], g.total_mib, kw] for m, g, kw in _DIFF_CASES]
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(cases)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, proc.stderr[-3000:]
    real = json.loads(lines[-1][len("RESULT "):])
    for (m, gpu, kw), theirs in zip(_DIFF_CASES, real, strict=True):
        mine = resolve_server_args(kw, "0.5.23", gpu, LLAMA if m == "llama" else MLA)
        assert mine.mem_fraction_static == pytest.approx(theirs["mfs"]), (gpu, kw)
        assert mine.chunked_prefill_size == theirs["cps"], (gpu, kw)
        if mine.decode_cuda_graph:
            assert mine.cuda_graph_max_bs == theirs["max_bs"], (gpu, kw)
            assert list(mine.cuda_graph_bs) == theirs["bs"], (gpu, kw)
        assert mine.decode_cuda_graph == theirs["decode_on"], (gpu, kw)
        assert mine.prefill_cuda_graph == theirs["prefill_on"], (gpu, kw)
        if mine.prefill_cuda_graph:
            assert list(mine.prefill_graph_sizes) == theirs["prefill_bs"], (gpu, kw)


# ---- differential: each read release's own server_args.py, run from its source on CPU ------------------------------
# The release sources (python only) are the ones the rules were read from; they run against this venv's newer
# torch / transformers with the shims below (stand-ins for what the old code imports but the defaults never use:
# kernels, quantization and MoE layers, and ModelConfig reporting a text-only Llama), and the GPU memory getter
# replaced by the GPU under test.  0.5.23 is covered by the installed-SGLang test above.

RELEASES_SRC = Path.home() / ".cache" / "sglwrap" / "releases" / "src"

_RELEASE_PROBE = textwrap.dedent("""
    import importlib, importlib.abc, importlib.machinery, json, os, sys, types
    import triton.runtime.cache as _tc
    for _n in ("default_cache_dir", "default_dump_dir", "default_override_dir"):
        if not hasattr(_tc, _n):
            setattr(_tc, _n, lambda: os.path.join(os.environ["TMPDIR"], "triton"))
    import torch, transformers
    if not hasattr(torch._C._cpu, "_is_amx_tile_supported"):
        torch._C._cpu._is_amx_tile_supported = lambda: False
    _reg = transformers.AutoConfig.register
    transformers.AutoConfig.register = staticmethod(lambda *a, **k: _reg(*a, **{**k, "exist_ok": True}))

    class _Any:
        def __call__(self, *a, **k): return False
        def __getattr__(self, n): return _Any()
        def __bool__(self): return False
        def __iter__(self): return iter(())

    def _mod_getattr(n):
        if n.startswith("__"):
            raise AttributeError(n)
        return _Any()

    class _TextModelConfig:
        is_multimodal = False
        def __init__(self):
            self.hf_config = transformers.AutoConfig.from_pretrained(sys.argv[2])
            self.hf_text_config = self.hf_config
            self.context_len = 131072
        @classmethod
        def from_server_args(cls, *a, **k): return cls()
        def __getattr__(self, n): return _Any()

    _STUBS = ("sglang.srt.configs.model_config", "sglang.srt.layers.quantization", "sglang.srt.layers.moe",
              "sgl_kernel")
    class _Loader(importlib.abc.Loader):
        def create_module(self, spec):
            m = types.ModuleType(spec.name)
            m.__file__, m.__path__, m.__getattr__ = __file__ if "__file__" in globals() else "<probe>", [], _mod_getattr
            if spec.name == "sglang.srt.configs.model_config":
                m.ModelConfig = _TextModelConfig
            return m
        def exec_module(self, module): pass
    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if any(name == p or name.startswith(p + ".") for p in _STUBS):
                return importlib.machinery.ModuleSpec(name, _Loader(), is_package=True)
            return None
    sys.meta_path.insert(0, _Finder())

    MEM = {"v": None}
    results = {}
    for version, cases in json.loads(sys.argv[3]):
        for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            del sys.modules[name]
        path = os.path.join(sys.argv[1], version)
        sys.path.insert(0, path)
        importlib.invalidate_caches()
        out = []
        try:
            import sglang.srt.server_args as SA
            cgc = sys.modules.get("sglang.srt.model_executor.cuda_graph_config")
            if cgc is not None and hasattr(cgc, "default_prefill_backend"):  # what is_cuda() picks on a GPU host
                cgc.default_prefill_backend = lambda: cgc.Backend.BREAKABLE
            for modname in ("sglang.srt.utils", "sglang.srt.utils.common", "sglang.srt.server_args"):
                m = sys.modules.get(modname)
                for n in ("get_device_memory_capacity", "get_nvgpu_memory_capacity"):
                    if m is not None and hasattr(m, n):
                        setattr(m, n, lambda *a, **k: MEM["v"])
            for mem, kw in cases:
                MEM["v"] = mem
                real = torch.cuda.is_available
                if version == "0.4.3":  # reads the GPU only when torch sees CUDA
                    torch.cuda.is_available = lambda: True
                try:
                    kw = dict(kw) if version in ("0.2.15", "0.3.0") else {**kw, "device": "cuda"}
                    sa = SA.ServerArgs(model_path=sys.argv[2], **kw)
                    if hasattr(sa, "resolve_once"):  # 0.5.19+: resolution runs outside __post_init__
                        sa.resolve_once()
                        from sglang.srt.arg_groups.overrides import resolved_view
                        sa = resolved_view(sa)
                finally:
                    torch.cuda.is_available = real
                cg = getattr(sa, "cuda_graph_config", None)
                dec = getattr(cg, "decode", None)
                out.append({"mfs": sa.mem_fraction_static, "cps": sa.chunked_prefill_size,
                            "max_bs": dec.max_bs if dec is not None else getattr(sa, "cuda_graph_max_bs", None),
                            "bs": dec.bs if dec is not None else getattr(sa, "cuda_graph_bs", None),
                            "mrr": sa.max_running_requests})
            results[version] = out
        except Exception as e:
            results[version] = f"{type(e).__name__}: {e}"
        sys.path.remove(path)
    print("RESULT " + json.dumps(results))
""")

# 0.5.2 and 0.5.3 first: imported after an older release in the same process, a namespace-package leftover of the
# older tree breaks their import (inspect on sglang.lang); on their own they load fine.
_RELEASE_VERSIONS = ("0.5.2", "0.5.3", "0.2.15", "0.3.0", "0.3.6", "0.4.0", "0.4.3", "0.4.6", "0.4.9", "0.4.10",
                     "0.5.1", "0.5.4", "0.5.5", "0.5.6", "0.5.7", "0.5.8", "0.5.9", "0.5.10", "0.5.11", "0.5.12",
                     "0.5.13", "0.5.14", "0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21")
# 0.5.22 is left out: its model hooks read checkpoint traits the text-only stub cannot answer (it takes the stub for
# a "Clef" checkpoint and refuses tp > 1); 0.5.23 runs for real in the installed-SGLang test above.
_RELEASE_CASES: list[tuple[GpuInfo, dict[str, object]]] = [
    (RTX4090, {}), (H100, {"tp_size": 8}), (H200, {"tp_size": 2}), (GpuInfo(16376, (8, 9)), {}),
    (H100, {"max_running_requests": 20}), (H100, {"disable_cuda_graph": True}),
    (H200, {"tp_size": 4, "chunked_prefill_size": 4096}),
    (H100, {"tp_size": 2, "dp_size": 2, "enable_dp_attention": True}),
]


def _release_cases(version: str) -> list[tuple[GpuInfo, dict[str, object]]]:
    """The cases whose flags exist in ``version`` (no --enable-dp-attention before 0.3.6)."""
    old = version in ("0.2.15", "0.3.0")
    return [(g, kw) for g, kw in _RELEASE_CASES if not (old and "enable_dp_attention" in kw)]


@pytest.mark.real_sglang
@pytest.mark.skipif(not RELEASES_SRC.is_dir(), reason="release sources not downloaded (~/.cache/sglwrap/releases)")
def test_rules_equal_each_release_run_from_its_source(tmp_path: Path) -> None:
    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
        "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}))
    versions = [v for v in _RELEASE_VERSIONS if (RELEASES_SRC / v / "sglang" / "srt" / "server_args.py").is_file()]
    plan = [[v, [[g.total_mib, kw] for g, kw in _release_cases(v)]] for v in versions]
    proc = subprocess.run([sys.executable, "-c", _RELEASE_PROBE, str(RELEASES_SRC), str(model), json.dumps(plan)],
                          capture_output=True, text=True, timeout=1500,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONDONTWRITEBYTECODE": "1",
                               "TMPDIR": str(tmp_path)})
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, proc.stderr[-3000:]
    real = json.loads(lines[-1][len("RESULT "):])
    failed = {v: out for v, out in real.items() if isinstance(out, str)}
    assert not failed, failed
    for version in versions:
        for (gpu, kw), theirs in zip(_release_cases(version), real[version], strict=True):
            mine = resolve_server_args(kw, version, gpu, LLAMA)
            where = (version, gpu.total_mib, kw)
            assert mine.mem_fraction_static == pytest.approx(theirs["mfs"]), where
            assert mine.chunked_prefill_size == (-1 if theirs["cps"] is None else theirs["cps"]), where
            # up to 0.5.2 the rules report the largest size captured, which the request pool
            # (--max-running-requests) trims below ServerArgs' bound (tests/test_sglang_defaults_diff.py checks it
            # against the runner's own list)
            if theirs["max_bs"] is not None and mine.decode_cuda_graph and "max_running_requests" not in kw:
                assert mine.cuda_graph_max_bs == theirs["max_bs"], where
            if theirs["bs"] is not None and "max_running_requests" not in kw and mine.decode_cuda_graph:
                # 0.5.3+: the list is made in server args; the runner later adds the request-pool size
                assert list(mine.cuda_graph_bs) == theirs["bs"], where
            assert mine.max_running_requests == theirs["mrr"], where
