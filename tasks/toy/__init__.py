"""The toy task: associative recall generated in memory (the framework's own tests, `make reproduce-toy`)."""
