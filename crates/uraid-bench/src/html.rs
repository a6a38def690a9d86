//! The HTML report: one self-contained file (inline CSS, charts as inline
//! SVG, no script, nothing fetched) with every table and chart, the
//! machine, and the warnings first.

use std::fmt::Write;

use uraid_core::units::fmt_size;

use crate::chart::Chart;
use crate::report::{report_grids, summary, Grid};
use crate::review::Report;

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

const STYLE: &str = "body{font-family:'DejaVu Sans',Verdana,sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 12px}\
h1{font-size:24px;margin-bottom:4px}h2{font-size:19px;margin-top:32px;border-bottom:1px solid #ccc;padding-bottom:4px}\
.sub{color:#555;margin-top:0}table{border-collapse:collapse;margin:8px 0;font-size:13px}\
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right;vertical-align:top}th{background:#f0f3f7}\
td:first-child,th:first-child{text-align:left}td.same{color:#777}td.up{color:#176d17}td.down{color:#a11}\
.note{color:#555;font-size:12px;margin-top:0}.warn{background:#fff4e0;border:1px solid #e0a040;padding:8px 12px;margin:12px 0}\
.summary{font-size:17px;font-weight:bold;margin:6px 0}.chart{margin:12px 0}.chart svg{max-width:100%;height:auto;border:1px solid #ddd}";

/// Appends `g` as an HTML heading, table and note.
pub fn grid_html(out: &mut String, g: &Grid) {
    let _ = write!(out, "<h2 id=\"{}\">{}</h2>\n<table>\n", escape(&g.id), escape(&g.title));
    if g.header.iter().any(|h| !h.is_empty()) {
        out.push_str("<tr>");
        for h in &g.header {
            let _ = write!(out, "<th>{}</th>", escape(h));
        }
        out.push_str("</tr>\n");
    }
    for r in &g.rows {
        out.push_str("<tr>");
        for c in r {
            let class = if c == "same" {
                " class=\"same\""
            } else if c.starts_with('+') && c.ends_with('%') {
                " class=\"up\""
            } else if c.starts_with('-') && c.ends_with('%') {
                " class=\"down\""
            } else {
                ""
            };
            let _ = write!(out, "<td{class}>{}</td>", escape(c));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    if !g.note.is_empty() {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(&g.note));
    }
}

/// Strips the XML prolog so the SVG can sit inside HTML.
fn inline_svg(svg: &str) -> &str {
    match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    }
}

/// One HTML page: title, an introduction (HTML, already escaped), the
/// warnings, the charts (inline SVG) and the tables.
pub fn page(title: &str, intro_html: &str, warnings: &[String], charts: &[Chart], grids: &[Grid]) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style></head><body>\n<h1>{}</h1>\n",
        escape(title),
        escape(title)
    );
    o.push_str(intro_html);
    if !warnings.is_empty() {
        o.push_str("<div class=\"warn\"><b>Warnings</b><ul>\n");
        for w in warnings {
            let _ = writeln!(o, "<li>{}</li>", escape(w));
        }
        o.push_str("</ul></div>\n");
    }
    if !charts.is_empty() {
        o.push_str("<h2 id=\"charts\">Charts</h2>\n");
        for c in charts {
            let _ = writeln!(
                o,
                "<div class=\"chart\" id=\"chart-{}\"><!-- {} -->\n{}\n<p class=\"note\">{}.png / {}.svg</p></div>",
                escape(&c.name),
                escape(&c.title),
                inline_svg(&c.svg),
                escape(&c.name),
                escape(&c.name)
            );
        }
    }
    for g in grids {
        grid_html(&mut o, g);
    }
    o.push_str("<p class=\"note\">Made by uraid's benchmark suite. MB/s = 10^6 bytes per second, as CrystalDiskMark and fio report it.</p>\n</body></html>\n");
    o
}

/// The machine line under a page title (HTML).
pub fn machine_line(m: &crate::machine::Machine) -> String {
    format!("{} · {} CPUs · Linux {} · {} · {} RAM", escape(&m.cpu), m.cpus, escape(&m.kernel), escape(&m.os), fmt_size(m.memory))
}

/// A suite report as one HTML document.
pub fn render(report: &Report, charts: &[Chart], title: &str) -> String {
    let mut intro = format!(
        "<p class=\"sub\">{} · started {} (unix) · {} of {} runs of {:.1} s after a {:.1} s warm-up · test area {} · data {}</p>\n<p>Targets: ",
        machine_line(&report.machine),
        report.started_unix,
        report.stat,
        report.runs,
        report.run_secs,
        report.warmup_secs,
        fmt_size(report.area),
        escape(&report.fill)
    );
    for (i, t) in report.targets.iter().enumerate() {
        let _ = write!(intro, "{}<b>{}</b>: {}", if i > 0 { "; " } else { "" }, escape(&t.label), escape(&t.description));
    }
    intro.push_str("</p>\n<p class=\"sub\">The machine while each target ran: ");
    for (i, t) in report.targets.iter().enumerate() {
        let _ = write!(intro, "{}<b>{}</b>: {}", if i > 0 { "; " } else { "" }, escape(&t.label), escape(&t.busy.describe()));
    }
    intro.push_str("</p>\n");
    for line in summary(report) {
        let _ = writeln!(intro, "<p class=\"summary\">{}</p>", escape(&line));
    }
    let mut grids = report_grids(report);
    // CrystalDiskMark's table leads, above the warnings and charts.
    if grids.first().is_some_and(|g| g.id == "cdm") {
        grid_html(&mut intro, &grids.remove(0));
    }
    page(title, &intro, &report.warnings(), charts, &grids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
        assert_eq!(inline_svg("<?xml version=\"1.0\"?>\n<svg x>"), "<svg x>");
    }
}
