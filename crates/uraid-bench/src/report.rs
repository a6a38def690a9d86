//! Tables and JSON: one target's results, and one drive against arrays.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use serde::Serialize;

use crate::suite::TestResult;

fn right(s: String) -> Cell {
    Cell::new(s).set_alignment(CellAlignment::Right)
}

/// Formats the headline figure of a test: MB/s for sequential, IOPS for
/// random profiles.
pub fn headline(r: &TestResult, v: &crate::RunResult) -> String {
    if r.test.profile.is_seq() {
        format!("{:.1} MB/s", v.mbps)
    } else {
        format!("{:.0} IOPS", v.iops)
    }
}

fn headline_value(r: &TestResult, v: &crate::RunResult) -> f64 {
    if r.test.profile.is_seq() {
        v.mbps
    } else {
        v.iops
    }
}

/// The table `uraid bench` prints: one row per test.
pub fn bench_table(results: &[TestResult]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec!["test", "MB/s", "IOPS", "mean µs", "p99 µs", "CPU %", "median MB/s", "spread %"]);
    for r in results {
        let b = &r.best;
        t.add_row(vec![
            Cell::new(r.test.to_string()),
            right(format!("{:.1}", b.mbps)),
            right(format!("{:.0}", b.iops)),
            right(format!("{:.1}", b.lat_mean_us)),
            right(format!("{:.1}", b.lat_p99_us)),
            right(format!("{:.0}", b.cpu_pct)),
            right(format!("{:.1}", r.median.mbps)),
            right(format!("{:.1}", r.spread_pct)),
        ]);
    }
    t
}

/// One configuration of a comparison: a single drive or an array.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// Column label, e.g. `1 drive` or `RAID 0 x4 128K`.
    pub label: String,
    /// Members used.
    pub drives: usize,
    /// Chunk size in bytes, for arrays.
    pub chunk: Option<u64>,
    /// Results per test, in the suite's order.
    pub results: Vec<TestResult>,
}

/// A comparison of one drive against arrays, as `uraid compare` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// What the members were (for the reader).
    pub members: String,
    /// The single drive first, then each array.
    pub configs: Vec<Config>,
}

/// One figure of one array against the single drive.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Gain {
    /// Difference to the single drive in percent (+100 = twice as fast).
    pub diff_pct: f64,
    /// Share of the ideal (drives x single drive) reached, in percent.
    pub of_ideal_pct: f64,
}

impl Comparison {
    /// The gain of config `c` on test `i` over the single drive (config 0).
    pub fn gain(&self, c: usize, i: usize) -> Option<Gain> {
        let base = self.configs.first()?.results.get(i)?;
        let r = self.configs.get(c)?.results.get(i)?;
        let b = headline_value(base, &base.best);
        let v = headline_value(r, &r.best);
        if b <= 0.0 {
            return None;
        }
        let ideal = b * self.configs[c].drives as f64 / self.configs[0].drives as f64;
        Some(Gain { diff_pct: (v / b - 1.0) * 100.0, of_ideal_pct: v / ideal * 100.0 })
    }

    /// The table: a row per test; single drive, then per array its figure,
    /// the difference in percent and the share of the ideal it reached.
    pub fn table(&self) -> Table {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        let mut header = vec![Cell::new("test")];
        for (i, c) in self.configs.iter().enumerate() {
            header.push(Cell::new(&c.label));
            if i > 0 {
                header.push(Cell::new("diff"));
                header.push(Cell::new(format!("of {}x", c.drives)));
            }
        }
        t.set_header(header);
        let n = self.configs.first().map(|c| c.results.len()).unwrap_or(0);
        for i in 0..n {
            let base = &self.configs[0].results[i];
            let mut row = vec![Cell::new(base.test.to_string())];
            for (c, cfg) in self.configs.iter().enumerate() {
                let r = &cfg.results[i];
                row.push(right(headline(r, &r.best)));
                if c > 0 {
                    match self.gain(c, i) {
                        Some(g) => {
                            row.push(right(format!("{:+.0}%", g.diff_pct)));
                            row.push(right(format!("{:.0}%", g.of_ideal_pct)));
                        }
                        None => {
                            row.push(right("-".into()));
                            row.push(right("-".into()));
                        }
                    }
                }
            }
            t.add_row(row);
        }
        t
    }
}
