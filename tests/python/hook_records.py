"""A DDP comm hook wrapper that records every bucket it is handed, for the Python tests.

recording_hook(hook, records) returns a hook that calls `hook` (terngrad_hook) and appends one
dict per bucket to `records`: step (the state's step counter when the bucket arrived), index,
numels and ids (the bucket's parameters' sizes and the state's fixed ids for them), buffer (the
bucket's input) and out (what the hook returned), both float32 copies on the CPU, and the
output's dtype and device. Copies, because DDP hands the same buffer back next step and the hook
reuses its output tensor. Imported by test_terngrad_torch*.py and by gpu_hook_check.py (the GPU
check carries this file beside it).
"""


def recording_hook(hook, records):
    def recording(st, bucket):
        params = bucket.parameters()
        rec = {"step": st.step, "index": bucket.index(), "numels": [p.numel() for p in params],
               "buffer": bucket.buffer().detach().float().cpu().clone()}
        fut = hook(st, bucket)
        rec["ids"] = [st._ids[p] for p in params]  # learned by the hook on its first call
        records.append(rec)

        def keep(f):
            v = f.value()
            rec["dtype"] = str(v.dtype).replace("torch.", "")
            rec["device"] = str(v.device)
            rec["out"] = v.detach().float().cpu().clone()
            return v

        return fut.then(keep)

    return recording
