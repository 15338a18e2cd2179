"""MQAR (zoology's multi-query associative recall), Figure 3 of the paper."""
