"""report_csv_read.py TRAINBENCH: `trainbench report --format csv` of the golden results read with Python's csv module,
as pandas.read_csv would read them: the index lists one file per table; each file is a header row and rows of the
same width; every cell of a numeric column (a unit in its name, or a count or fraction) is empty or float()-able, with
no %, unit or thousands separator. Exits 1 naming the first bad cell."""
import csv
import os
import re
import subprocess
import sys
import tempfile

NUMERIC = re.compile(r".*_(ms|us|gib|w|gbps|tbps|mhz|per_s|per_gpu|per_token|se|median|p10|p90|max)$")
COUNTS = {"tflops", "mfu", "ratio", "efficiency", "comm_share", "jitter", "vs_median", "gpus", "rank", "steps", "bytes",
          "value", "expected_min", "sibling_median", "loss_first", "loss_last", "reference_mfu", "rows"}


def fail(msg):
    print("report_csv_read: " + msg)
    sys.exit(1)


def main():
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        index_path = os.path.join(d, "r.csv")
        subprocess.run([exe, "report", "tests/report/golden", "--format", "csv", "-o", index_path], check=True,
                       stdout=subprocess.DEVNULL)
        with open(index_path, newline="") as f:
            index = list(csv.DictReader(f))
        if len(index) < 5:
            fail(f"{index_path}: {len(index)} tables")
        for entry in index:
            path = os.path.join(d, entry["file"])
            with open(path, newline="") as f:
                rows = list(csv.reader(f))
            header, body = rows[0], rows[1:]
            if str(len(body)) != entry["rows"]:
                fail(f"{entry['file']}: {len(body)} rows, the index says {entry['rows']}")
            for name in header:
                if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
                    fail(f"{entry['file']}: header '{name}' is not snake_case")
            numbers = 0
            for i, row in enumerate(body, 2):
                if len(row) != len(header):
                    fail(f"{entry['file']}:{i}: {len(row)} cells, the header has {len(header)}")
                for name, cell in zip(header, row):
                    if not (name in COUNTS or NUMERIC.match(name)) or cell == "":
                        continue
                    try:
                        float(cell)
                        numbers += 1
                    except ValueError:
                        fail(f"{entry['file']}:{i}: {name} = '{cell}' is not a plain number")
            print(f"{entry['file']}: {len(header)} columns, {len(body)} rows, {numbers} numbers")


if __name__ == "__main__":
    main()
