"""RegBench (seq_icl's in-context regular-language learning), Figure 2 of the paper."""
