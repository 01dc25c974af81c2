/* SPDX-License-Identifier: Apache-2.0 */
/* The layout of every public struct (include/kvtier/), checked when the
 * library builds. A program built against an older kvtier passes its own
 * struct: `size` first, then the fields it knew, at the offsets it knew
 * (util/opts.h). So a field is never moved, removed or inserted, and a new
 * one is appended where it grows the struct; an embedded struct that grows
 * moves every field after it, which these lines catch too.
 *
 * When a build stops here: if the change appended fields to a struct that
 * starts with `size`, add their KVT_AT lines and the new KVT_SIZE
 * (`scripts/structure_check.py api-lines` prints today's lines); anything
 * else breaks the callers already built, and needs a new major version
 * (transport/client.map, CHANGELOG.md). The figures are those of LP64 Linux
 * (x86-64, aarch64), the targets kvtier is built for. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/client.h"
#include "kvtier/device.h"
#include "kvtier/log.h"
#include "kvtier/model.h"
#include "kvtier/store.h"
#include "kvtier/types.h"

#if defined(__LP64__) && (defined(__x86_64__) || defined(__aarch64__))

#define KVT_SIZE(s, n) \
	_Static_assert(sizeof(struct s) == (n), "struct " #s " changed size: see util/api_layout.c")
#define KVT_AT(s, f, off) \
	_Static_assert(offsetof(struct s, f) == (off), #s "." #f " moved: see util/api_layout.c")

/* kvtier/client.h */
KVT_SIZE(kvt_client_opts, 32);
KVT_AT(kvt_client_opts, size, 0);
KVT_AT(kvt_client_opts, socket_path, 8);
KVT_AT(kvt_client_opts, token, 16);
KVT_AT(kvt_client_opts, completions, 24);
KVT_SIZE(kvt_client_ns, 40);
KVT_AT(kvt_client_ns, handle, 0);
KVT_AT(kvt_client_ns, block_bytes, 8);
KVT_AT(kvt_client_ns, salt, 16);
KVT_AT(kvt_client_ns, block_tokens, 32);
KVT_AT(kvt_client_ns, max_keys, 36);
KVT_SIZE(kvt_client_region, 80);
KVT_AT(kvt_client_region, size, 0);
KVT_AT(kvt_client_region, memfd, 8);
KVT_AT(kvt_client_region, bytes, 16);
KVT_AT(kvt_client_region, offset, 24);
KVT_AT(kvt_client_region, layers, 32);
KVT_AT(kvt_client_region, pages, 36);
KVT_AT(kvt_client_region, layer_stride, 40);
KVT_AT(kvt_client_region, kv_stride, 48);
KVT_AT(kvt_client_region, page_stride, 56);
KVT_AT(kvt_client_region, cuda_ipc, 64);
KVT_AT(kvt_client_region, cuda_ipc_len, 72);
KVT_AT(kvt_client_region, device, 76);
KVT_SIZE(kvt_client_part, 32);
KVT_AT(kvt_client_part, memfd, 0);
KVT_AT(kvt_client_part, offset, 8);
KVT_AT(kvt_client_part, bytes, 16);
KVT_AT(kvt_client_part, cuda_ipc, 24);
KVT_SIZE(kvt_client_layer, 16);
KVT_AT(kvt_client_layer, part, 0);
KVT_AT(kvt_client_layer, offset, 8);
KVT_SIZE(kvt_client_parts, 80);
KVT_AT(kvt_client_parts, size, 0);
KVT_AT(kvt_client_parts, n_parts, 8);
KVT_AT(kvt_client_parts, parts, 16);
KVT_AT(kvt_client_parts, layers, 24);
KVT_AT(kvt_client_parts, pages, 28);
KVT_AT(kvt_client_parts, layer, 32);
KVT_AT(kvt_client_parts, kv_stride, 40);
KVT_AT(kvt_client_parts, page_stride, 48);
KVT_AT(kvt_client_parts, cuda_ipc_len, 56);
KVT_AT(kvt_client_parts, device, 60);
KVT_AT(kvt_client_parts, why, 64);
KVT_AT(kvt_client_parts, why_len, 72);

/* kvtier/device.h */
KVT_SIZE(kvt_dev_opts, 16);
KVT_AT(kvt_dev_opts, size, 0);
KVT_AT(kvt_dev_opts, backend, 8);
KVT_AT(kvt_dev_opts, device, 12);
KVT_SIZE(kvt_dev_info, 352);
KVT_AT(kvt_dev_info, size, 0);
KVT_AT(kvt_dev_info, backend, 8);
KVT_AT(kvt_dev_info, device, 12);
KVT_AT(kvt_dev_info, device_count, 16);
KVT_AT(kvt_dev_info, name, 20);
KVT_AT(kvt_dev_info, pci_bus_id, 148);
KVT_AT(kvt_dev_info, total_mem_bytes, 184);
KVT_AT(kvt_dev_info, free_mem_bytes, 192);
KVT_AT(kvt_dev_info, cc_major, 200);
KVT_AT(kvt_dev_info, cc_minor, 204);
KVT_AT(kvt_dev_info, pcie_gen, 208);
KVT_AT(kvt_dev_info, pcie_width, 212);
KVT_AT(kvt_dev_info, multiprocessors, 216);
KVT_AT(kvt_dev_info, can_map_host, 220);
KVT_AT(kvt_dev_info, ipc, 221);
KVT_AT(kvt_dev_info, fallback_reason, 222);
KVT_SIZE(kvt_dev_ipc_handle, 88);
KVT_AT(kvt_dev_ipc_handle, backend, 0);
KVT_AT(kvt_dev_ipc_handle, fd, 4);
KVT_AT(kvt_dev_ipc_handle, len, 8);
KVT_AT(kvt_dev_ipc_handle, offset, 16);
KVT_AT(kvt_dev_ipc_handle, bytes, 24);
KVT_SIZE(kvt_dev_layout_desc, 80);
KVT_AT(kvt_dev_layout_desc, size, 0);
KVT_AT(kvt_dev_layout_desc, kind, 8);
KVT_AT(kvt_dev_layout_desc, layers, 12);
KVT_AT(kvt_dev_layout_desc, kv_heads, 16);
KVT_AT(kvt_dev_layout_desc, head_dim, 20);
KVT_AT(kvt_dev_layout_desc, elem_bytes, 24);
KVT_AT(kvt_dev_layout_desc, page_tokens, 28);
KVT_AT(kvt_dev_layout_desc, pages_per_block, 32);
KVT_AT(kvt_dev_layout_desc, num_pages, 40);
KVT_AT(kvt_dev_layout_desc, page_stride, 48);
KVT_AT(kvt_dev_layout_desc, kv_stride, 56);
KVT_AT(kvt_dev_layout_desc, k_base, 64);
KVT_AT(kvt_dev_layout_desc, v_base, 72);
KVT_SIZE(kvt_dev_xfer_opts, 40);
KVT_AT(kvt_dev_xfer_opts, size, 0);
KVT_AT(kvt_dev_xfer_opts, path, 8);
KVT_AT(kvt_dev_xfer_opts, layer_events, 16);
KVT_AT(kvt_dev_xfer_opts, layer_cb, 24);
KVT_AT(kvt_dev_xfer_opts, layer_cb_arg, 32);

/* kvtier/log.h */

/* kvtier/model.h */
KVT_SIZE(kvt_model, 184);
KVT_AT(kvt_model, name, 0);
KVT_AT(kvt_model, model_type, 64);
KVT_AT(kvt_model, dtype, 96);
KVT_AT(kvt_model, layers, 100);
KVT_AT(kvt_model, hidden, 104);
KVT_AT(kvt_model, heads, 108);
KVT_AT(kvt_model, kv_heads, 112);
KVT_AT(kvt_model, head_dim, 116);
KVT_AT(kvt_model, intermediate, 120);
KVT_AT(kvt_model, vocab, 124);
KVT_AT(kvt_model, max_context, 128);
KVT_AT(kvt_model, tie_embeddings, 132);
KVT_AT(kvt_model, qkv_bias, 133);
KVT_AT(kvt_model, qk_norm, 134);
KVT_AT(kvt_model, experts, 136);
KVT_AT(kvt_model, experts_per_tok, 140);
KVT_AT(kvt_model, expert_intermediate, 144);
KVT_AT(kvt_model, shared_intermediate, 148);
KVT_AT(kvt_model, moe_layers, 152);
KVT_AT(kvt_model, dense_layers, 156);
KVT_AT(kvt_model, kv_lora_rank, 160);
KVT_AT(kvt_model, q_lora_rank, 164);
KVT_AT(kvt_model, qk_rope_head_dim, 168);
KVT_AT(kvt_model, qk_nope_head_dim, 172);
KVT_AT(kvt_model, v_head_dim, 176);
KVT_AT(kvt_model, mtp_layers, 180);
KVT_SIZE(kvt_gpu, 112);
KVT_AT(kvt_gpu, name, 0);
KVT_AT(kvt_gpu, mem_bytes, 48);
KVT_AT(kvt_gpu, mem_bw, 56);
KVT_AT(kvt_gpu, bf16_flops, 64);
KVT_AT(kvt_gpu, fp8_flops, 72);
KVT_AT(kvt_gpu, pcie_gen, 80);
KVT_AT(kvt_gpu, c2c_bw, 88);
KVT_AT(kvt_gpu, mig, 96);
KVT_AT(kvt_gpu, source, 104);
KVT_SIZE(kvt_sizing, 96);
KVT_AT(kvt_sizing, kv_bytes_per_token, 0);
KVT_AT(kvt_sizing, kv_bytes_per_context, 8);
KVT_AT(kvt_sizing, params_total, 16);
KVT_AT(kvt_sizing, params_active, 24);
KVT_AT(kvt_sizing, weight_bytes, 32);
KVT_AT(kvt_sizing, mem_for_users, 40);
KVT_AT(kvt_sizing, mem_usable, 48);
KVT_AT(kvt_sizing, users_fit, 56);
KVT_AT(kvt_sizing, decode_tok_s_batch1, 64);
KVT_AT(kvt_sizing, decode_tok_s_batch, 72);
KVT_AT(kvt_sizing, prefill_s, 80);
KVT_AT(kvt_sizing, batch_users, 88);
KVT_SIZE(kvt_sizing_opts, 56);
KVT_AT(kvt_sizing_opts, size, 0);
KVT_AT(kvt_sizing_opts, kv_dtype, 8);
KVT_AT(kvt_sizing_opts, weight_dtype, 12);
KVT_AT(kvt_sizing_opts, context, 16);
KVT_AT(kvt_sizing_opts, users, 24);
KVT_AT(kvt_sizing_opts, tp, 28);
KVT_AT(kvt_sizing_opts, mem_util, 32);
KVT_AT(kvt_sizing_opts, overhead_bytes, 40);
KVT_AT(kvt_sizing_opts, mfu, 48);
KVT_SIZE(kvt_plan_opts, 128);
KVT_AT(kvt_plan_opts, size, 0);
KVT_AT(kvt_plan_opts, model, 8);
KVT_AT(kvt_plan_opts, kv_dtype, 16);
KVT_AT(kvt_plan_opts, block_tokens, 20);
KVT_AT(kvt_plan_opts, block_bytes, 24);
KVT_AT(kvt_plan_opts, tier_bw, 32);
KVT_AT(kvt_plan_opts, tier_latency_s, 72);
KVT_AT(kvt_plan_opts, prefill_flops_s, 112);
KVT_AT(kvt_plan_opts, prefill_tokens_s, 120);
KVT_SIZE(kvt_plan, 64);
KVT_AT(kvt_plan, blocks, 0);
KVT_AT(kvt_plan, load_blocks, 8);
KVT_AT(kvt_plan, load_s, 16);
KVT_AT(kvt_plan, recompute_s, 24);
KVT_AT(kvt_plan, total_s, 32);
KVT_AT(kvt_plan, all_load_s, 40);
KVT_AT(kvt_plan, all_recompute_s, 48);
KVT_AT(kvt_plan, load_bytes, 56);

/* kvtier/store.h */
KVT_SIZE(kvt_ssd_dir, 16);
KVT_AT(kvt_ssd_dir, path, 0);
KVT_AT(kvt_ssd_dir, bytes, 8);
KVT_SIZE(kvt_store_opts, 136);
KVT_AT(kvt_store_opts, size, 0);
KVT_AT(kvt_store_opts, dram_bytes, 8);
KVT_AT(kvt_store_opts, dram_slab_bytes, 16);
KVT_AT(kvt_store_opts, dram_huge_pages, 24);
KVT_AT(kvt_store_opts, checksum_on_put, 25);
KVT_AT(kvt_store_opts, policy, 32);
KVT_AT(kvt_store_opts, ssd_dir, 40);
KVT_AT(kvt_store_opts, ssd_bytes, 48);
KVT_AT(kvt_store_opts, ssd_segment_bytes, 56);
KVT_AT(kvt_store_opts, ssd_queue_depth, 64);
KVT_AT(kvt_store_opts, ssd_force_threads, 68);
KVT_AT(kvt_store_opts, dram_high_watermark, 72);
KVT_AT(kvt_store_opts, dram_low_watermark, 80);
KVT_AT(kvt_store_opts, ssd_admission, 88);
KVT_AT(kvt_store_opts, ssd_codec, 96);
KVT_AT(kvt_store_opts, ssd_codec_min_ratio, 104);
KVT_AT(kvt_store_opts, dram_warm, 112);
KVT_AT(kvt_store_opts, dram_fd, 116);
KVT_AT(kvt_store_opts, ssd_dirs, 120);
KVT_AT(kvt_store_opts, n_ssd_dirs, 128);
KVT_SIZE(kvt_write_down, 40);
KVT_AT(kvt_write_down, written, 0);
KVT_AT(kvt_write_down, written_bytes, 8);
KVT_AT(kvt_write_down, refused, 16);
KVT_AT(kvt_write_down, left, 24);
KVT_AT(kvt_write_down, ms, 32);
KVT_SIZE(kvt_slot, 48);
KVT_AT(kvt_slot, data, 0);
KVT_AT(kvt_slot, len, 8);
KVT_AT(kvt_slot, priv, 16);
KVT_SIZE(kvt_tier_device, 600);
KVT_AT(kvt_tier_device, path, 0);
KVT_AT(kvt_tier_device, state, 512);
KVT_AT(kvt_tier_device, error, 516);
KVT_AT(kvt_tier_device, capacity_bytes, 520);
KVT_AT(kvt_tier_device, used_bytes, 528);
KVT_AT(kvt_tier_device, blocks, 536);
KVT_AT(kvt_tier_device, writes, 544);
KVT_AT(kvt_tier_device, write_bytes, 552);
KVT_AT(kvt_tier_device, reads, 560);
KVT_AT(kvt_tier_device, read_bytes, 568);
KVT_AT(kvt_tier_device, errors, 576);
KVT_AT(kvt_tier_device, dropped, 584);
KVT_AT(kvt_tier_device, recovered, 592);
KVT_SIZE(kvt_tier_stats, 72);
KVT_AT(kvt_tier_stats, capacity_bytes, 0);
KVT_AT(kvt_tier_stats, used_bytes, 8);
KVT_AT(kvt_tier_stats, blocks, 16);
KVT_AT(kvt_tier_stats, hits, 24);
KVT_AT(kvt_tier_stats, bytes_in, 32);
KVT_AT(kvt_tier_stats, bytes_out, 40);
KVT_AT(kvt_tier_stats, evictions, 48);
KVT_AT(kvt_tier_stats, errors, 56);
KVT_AT(kvt_tier_stats, present, 64);
KVT_AT(kvt_tier_stats, degraded, 65);
KVT_AT(kvt_tier_stats, io_fallback, 66);
KVT_SIZE(kvt_ssd_health, 96);
KVT_AT(kvt_ssd_health, recovered, 0);
KVT_AT(kvt_ssd_health, torn, 8);
KVT_AT(kvt_ssd_health, corrupt, 16);
KVT_AT(kvt_ssd_health, superseded, 24);
KVT_AT(kvt_ssd_health, removed, 32);
KVT_AT(kvt_ssd_health, quarantined, 40);
KVT_AT(kvt_ssd_health, foreign, 48);
KVT_AT(kvt_ssd_health, scanned, 56);
KVT_AT(kvt_ssd_health, open_ms, 64);
KVT_AT(kvt_ssd_health, tombstones, 72);
KVT_AT(kvt_ssd_health, probes, 80);
KVT_AT(kvt_ssd_health, resumed, 88);
KVT_SIZE(kvt_warm_stats, 120);
KVT_AT(kvt_warm_stats, on, 0);
KVT_AT(kvt_warm_stats, adopted, 1);
KVT_AT(kvt_warm_stats, refused, 2);
KVT_AT(kvt_warm_stats, generation, 8);
KVT_AT(kvt_warm_stats, blocks, 16);
KVT_AT(kvt_warm_stats, bytes, 24);
KVT_AT(kvt_warm_stats, verified, 32);
KVT_AT(kvt_warm_stats, dropped_torn, 40);
KVT_AT(kvt_warm_stats, dropped_header, 48);
KVT_AT(kvt_warm_stats, dropped_namespace, 56);
KVT_AT(kvt_warm_stats, dropped_checksum, 64);
KVT_AT(kvt_warm_stats, rebuild_us, 72);
KVT_AT(kvt_warm_stats, write_down, 80);
KVT_SIZE(kvt_counter, 40);
KVT_AT(kvt_counter, name, 0);
KVT_AT(kvt_counter, help, 8);
KVT_AT(kvt_counter, unit, 16);
KVT_AT(kvt_counter, kind, 24);
KVT_AT(kvt_counter, value, 32);
KVT_SIZE(kvt_read_into, 48);
KVT_AT(kvt_read_into, dst, 0);
KVT_AT(kvt_read_into, dst_cnt, 8);
KVT_AT(kvt_read_into, res, 16);
KVT_AT(kvt_read_into, planned_cb, 24);
KVT_AT(kvt_read_into, landed_cb, 32);
KVT_AT(kvt_read_into, arg, 40);
KVT_SIZE(kvt_store_stats, 752);
KVT_AT(kvt_store_stats, size, 0);
KVT_AT(kvt_store_stats, tier, 8);
KVT_AT(kvt_store_stats, namespaces, 368);
KVT_AT(kvt_store_stats, blocks, 376);
KVT_AT(kvt_store_stats, puts, 384);
KVT_AT(kvt_store_stats, gets, 392);
KVT_AT(kvt_store_stats, get_misses, 400);
KVT_AT(kvt_store_stats, removes, 408);
KVT_AT(kvt_store_stats, lookups, 416);
KVT_AT(kvt_store_stats, lookup_keys, 424);
KVT_AT(kvt_store_stats, lookup_hit_keys, 432);
KVT_AT(kvt_store_stats, checksum_failures, 440);
KVT_AT(kvt_store_stats, index_bytes, 448);
KVT_AT(kvt_store_stats, dram_dropped, 456);
KVT_AT(kvt_store_stats, ssd_copies_dropped, 464);
KVT_AT(kvt_store_stats, ssd, 472);
KVT_AT(kvt_store_stats, ssd_admission_refused, 568);
KVT_AT(kvt_store_stats, ssd_admission_refused_bytes, 576);
KVT_AT(kvt_store_stats, demote_batches, 584);
KVT_AT(kvt_store_stats, demote_batch_blocks, 592);
KVT_AT(kvt_store_stats, ssd_compressed_writes, 600);
KVT_AT(kvt_store_stats, ssd_write_raw_bytes, 608);
KVT_AT(kvt_store_stats, ssd_write_stored_bytes, 616);
KVT_AT(kvt_store_stats, recovered_unattached, 624);
KVT_AT(kvt_store_stats, warm, 632);

/* kvtier/types.h */
KVT_SIZE(kvt_key, 16);
KVT_AT(kvt_key, bytes, 0);
KVT_SIZE(kvt_ns_desc, 144);
KVT_AT(kvt_ns_desc, size, 0);
KVT_AT(kvt_ns_desc, model_id, 8);
KVT_AT(kvt_ns_desc, layout, 72);
KVT_AT(kvt_ns_desc, dtype, 76);
KVT_AT(kvt_ns_desc, layers, 80);
KVT_AT(kvt_ns_desc, kv_heads, 84);
KVT_AT(kvt_ns_desc, head_dim, 88);
KVT_AT(kvt_ns_desc, block_tokens, 92);
KVT_AT(kvt_ns_desc, tp_rank, 96);
KVT_AT(kvt_ns_desc, tp_size, 100);
KVT_AT(kvt_ns_desc, tenant_salt, 104);
KVT_AT(kvt_ns_desc, tenant_salt_len, 136);

#endif
