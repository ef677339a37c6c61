#!/usr/bin/env python3
"""A short table of the kimi-bench-model JSON files in a folder (run-device.sh's
$OUT): prefill and decode times, weight bytes and the HBM floors."""
import json, sys, glob, os
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        j = json.load(open(f))
    except Exception as e:
        print(os.path.basename(f), "unreadable:", e); continue
    p = j.get("prefill", {})
    d = j.get("decode", [])
    def step(x):
        s = "b%s %.2f ms" % (x.get("batch"), x.get("ms_per_step_median", x.get("ms", 0)))
        if "ms_per_single_step_median" in x:
            s += " (single step %.2f ms, %s replays, %s captures, %s updates, %.2f + %.2f ms capturing)" % (
                x["ms_per_single_step_median"], x.get("graph_replays"), x.get("graph_captures"),
                x.get("graph_updates"), x.get("graph_capture_ms", 0), x.get("graph_instantiate_ms", 0))
        return s
    ds = ", ".join(step(x) for x in d) if isinstance(d, list) else str(d)[:120]
    print("%-22s prefill %s: %s ms | %s" % (os.path.basename(f), p.get("tokens"), p.get("ms_median", p.get("ms")), ds))
    fl = j.get("hbm_floor_batch1")
    if fl:
        print("%-22s weights %s (manifest %s, device %s) %s | floor %.3f ms (x%.2f), with MXFP4 experts %.3f ms (x%.2f)" % (
            "", j.get("weight_bytes"), j.get("manifest_weight_bytes"),
            j.get("weight_device_bytes_measured"), j.get("weight_bytes_by_type"),
            fl.get("floor_ms", 0), fl.get("measured_over_floor", 0),
            fl.get("floor_ms_mxfp4_experts", 0), fl.get("measured_over_floor_mxfp4_experts", 0)))
