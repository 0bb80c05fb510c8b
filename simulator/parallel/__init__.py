"""Model parallelism: parallel plans, pipeline schedules, expert and context parallelism."""
