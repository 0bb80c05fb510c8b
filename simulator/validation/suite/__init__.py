"""Every validation at once (``clustersim validate``): one runner per suite
(:mod:`.runners`), the statuses, exit code and ``validation/REPORT.md`` (:mod:`.run`), and
``clustersim validate all`` (:mod:`.command`)."""
