"""Attention for training the draft on a CPU at the BlockMask's own sparsity (registered as ``block_sparse_cpu``).

``block_sparse``  the attention function, registered in speculators' ``AttentionInterface``; refuses dense masks
``plan``          a BlockMask as gather indices: kept key blocks (mask_mod inside partial ones), TTT diagonals
``rows``          the rows each TTT step computes (past step 0, only those reaching a loss) and the keys they left
``block_mask``    speculators' EAGLE-3 BlockMask built without vmap (the same tables as ``create_block_mask``)
"""
