"""kforge benchmark harness: kforge against PyTorch SDPA (cuDNN, flash) and flex_attention.

    python -m bench run --set gqa-decode|gqa-prefill|all [--rounds R] [--out DIR]
    python -m bench --markdown-from RESULTS.json        (regenerate the table)
    python -m bench --plots-from RESULTS.json --out DIR (regenerate the plots)

Only bench/harness.py needs torch; statistics, sets, the markdown writer and the plots
work from a saved JSON without a GPU.
"""
