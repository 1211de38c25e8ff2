"""Celery side of FlowForge's benchmark (scripts/bench/celery.go).

The app: a no-op task on the benchmark's private RabbitMQ node, acks_late,
JSON only, no result backend, publisher confirms on. Also a publisher:

    python3 benchtasks.py bulk N          publish N tasks from 8 threads, then exit
    python3 benchtasks.py loop SECONDS K  K threads, each publishing one task
                                          at a time (waiting for its confirm)
                                          for SECONDS

It prints one JSON object: {"published": N, "seconds": S}.
"""
import json
import os
import sys
import threading
import time

from celery import Celery

app = Celery("benchtasks", broker=os.environ["BENCH_AMQP_URL"])
app.conf.update(
    task_acks_late=True,
    task_ignore_result=True,
    task_serializer="json",
    accept_content=["json"],
    task_default_queue=os.environ.get("BENCH_QUEUE", "celery_bench"),
    broker_transport_options={"confirm_publish": True},
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="noop")
def noop():
    return None


def publish(count, deadline):
    """Publish count tasks (or until deadline) on one connection."""
    n = 0
    with app.connection_for_write() as conn:
        with app.producer_or_acquire() as producer:
            while (count is None or n < count) and (deadline is None or time.time() < deadline):
                noop.apply_async(producer=producer)
                n += 1
    return n


def threaded(k, work):
    """Run work(i) on k threads and return the sum of their results."""
    counts = []
    lock = threading.Lock()

    def run(i):
        n = work(i)
        with lock:
            counts.append(n)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts)


def main(argv):
    start = time.time()
    if argv[1] == "bulk":
        n = int(argv[2])
        total = threaded(8, lambda i: publish(n // 8 + (1 if i < n % 8 else 0), None))
    else:
        deadline = start + float(argv[2])
        total = threaded(int(argv[3]), lambda i: publish(None, deadline))
    print(json.dumps({"published": total, "seconds": time.time() - start}))


if __name__ == "__main__":
    main(sys.argv)
