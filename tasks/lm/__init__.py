"""Language modelling (paper Table 2: WikiText-103 under the HGRN2/fairseq setup; Figure 4:
OpenWebText2 with a 12-layer GPT-2). Data -> uint16 token cache, LM with any mixer in the
attention slot, block evaluation (ppl = exp(mean token NLL)), training loop, generation."""
