"""The evaluation defaults that ``eagle3kit evaluate`` and ``eagle3kit vllm-check`` share.

τ depends on the prompts and on the continuation length (a draft is accepted less far into a reply), so the two
commands measure on the same number of prompts, cut to the same length, continued for the same number of tokens.
"""

N_PROMPTS = 8  # held-out conversations (or --prompt texts) used as prompts
MAX_PROMPT_TOKENS = 128  # a prompt (the first user turn) is cut to this many tokens
MAX_NEW_TOKENS = 32  # greedy tokens generated per prompt
K = 0  # draft tokens per round; 0: the draft's own ttt_steps
