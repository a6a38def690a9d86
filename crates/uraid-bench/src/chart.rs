//! Charts as PNG and SVG, drawn with plotters. Text uses DejaVu Sans,
//! bundled in the binary (assets/fonts, Bitstream Vera licence beside it),
//! so no system font or fontconfig is needed.
//!
//! The charts the reviews print: ATTO-style MB/s against transfer size (log
//! scale), CrystalDiskMark-style bars per test and target, chunk size
//! against MB/s and IOPS, the linear surface, and latency percentiles.

use std::io::Cursor;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;
use serde::Serialize;
use uraid_core::units::fmt_size;
use uraid_core::{Error, ErrorKind, Result};

use crate::loadgen::PERCENTILES;
use crate::review::TargetReport;
use crate::stats::{Metric, Stat};
use crate::sweep::Surface;

/// DejaVu Sans (fonts-dejavu-core 2.37), embedded.
static FONT: &[u8] = include_bytes!("../assets/fonts/DejaVuSans.ttf");
/// Family name the charts use.
const FAMILY: &str = "sans-serif";
/// Chart size in pixels (width, height).
pub const SIZE: (u32, u32) = (960, 540);

/// The tab10 palette, then darker variants: distinct colours for up to
/// twenty series.
const PALETTE: [RGBColor; 20] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(17, 66, 100),
    RGBColor(160, 80, 8),
    RGBColor(24, 90, 24),
    RGBColor(120, 20, 22),
    RGBColor(82, 56, 106),
    RGBColor(0, 0, 0),
    RGBColor(130, 60, 110),
    RGBColor(60, 60, 60),
    RGBColor(105, 106, 18),
    RGBColor(12, 106, 116),
];

/// More series than this get their legend in a panel beside the plot.
const INLINE_LEGEND_MAX: usize = 6;

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn ensure_font() -> Result<()> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok()
            && plotters::style::register_font(FAMILY, FontStyle::Bold, FONT).is_ok()
    });
    if !ok {
        return Err(Error::new(ErrorKind::Unsupported, "the embedded chart font does not load"));
    }
    Ok(())
}

/// One line of a line chart.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points in data units, x increasing.
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (write passes, baselines).
    pub dashed: bool,
    /// Colour index in the palette.
    pub color: usize,
}

/// How the x axis of a line chart maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum XAxis {
    /// Linear, labelled with numbers.
    Linear,
    /// Log2, labelled as sizes (512, 4K, 1M).
    Log2Size,
    /// Categories 0..n labelled with the given names.
    Categories,
}

/// What a chart shows, independent of the output format.
#[derive(Debug, Clone, Serialize)]
pub enum Spec {
    /// Lines against x.
    Lines {
        /// x axis title.
        x_label: String,
        /// y axis title.
        y_label: String,
        /// x mapping.
        x_axis: XAxis,
        /// Names of the categories when `x_axis` is Categories.
        categories: Vec<String>,
        /// Log10 y axis.
        y_log: bool,
        /// The lines.
        series: Vec<Series>,
    },
    /// Horizontal grouped bars: one group per category, one bar per series.
    Bars {
        /// Value axis title.
        x_label: String,
        /// Row names (tests), top to bottom.
        categories: Vec<String>,
        /// (series name, one value per category).
        series: Vec<(String, Vec<f64>)>,
    },
}

/// A chart ready to be written: its name, title, SVG text and PNG bytes.
#[derive(Debug, Clone)]
pub struct Chart {
    /// File stem (`atto`, `cdm-mbps`).
    pub name: String,
    /// Title drawn on the chart.
    pub title: String,
    /// What it shows.
    pub spec: Spec,
    /// SVG document.
    pub svg: String,
    /// PNG file contents.
    pub png: Vec<u8>,
}

fn draw_err<E: std::fmt::Debug>(what: &str) -> impl Fn(E) -> Error + '_ {
    move |e| Error::new(ErrorKind::Io, format!("cannot draw the {what} chart: {e:?}"))
}

/// Draws `spec` as SVG and PNG.
///
/// Errors: the font or the drawing failed (not expected with finite data).
pub fn render(name: &str, title: &str, spec: Spec) -> Result<Chart> {
    ensure_font()?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw(&root, title, &spec).map_err(draw_err(name))?;
        root.present().map_err(draw_err(name))?;
    }
    let mut rgb = vec![0u8; (SIZE.0 * SIZE.1 * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area();
        draw(&root, title, &spec).map_err(draw_err(name))?;
        root.present().map_err(draw_err(name))?;
    }
    let mut png = Vec::new();
    image::ImageEncoder::write_image(
        image::codecs::png::PngEncoder::new(Cursor::new(&mut png)),
        &rgb,
        SIZE.0,
        SIZE.1,
        image::ColorType::Rgb8,
    )
    .map_err(|e| Error::new(ErrorKind::Io, format!("cannot encode the {name} chart as PNG: {e}")))?;
    Ok(Chart { name: name.to_string(), title: title.to_string(), spec, svg, png })
}

type DrawResult<DB> = std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, title: &str, spec: &Spec) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    match spec {
        Spec::Lines { x_label, y_label, x_axis, categories, y_log, series } => {
            draw_lines(root, title, x_label, y_label, *x_axis, categories, *y_log, series)
        }
        Spec::Bars { x_label, categories, series } => draw_bars(root, title, x_label, categories, series),
    }
}

fn nice_max(v: f64) -> f64 {
    if v.is_nan() || v <= 0.0 || v.is_infinite() {
        return 1.0;
    }
    v * 1.12
}

fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

#[allow(clippy::too_many_arguments)]
fn draw_lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    x_axis: XAxis,
    categories: &[String],
    y_log: bool,
    series: &[Series],
) -> DrawResult<DB> {
    let tx = |x: f64| if x_axis == XAxis::Log2Size { x.max(1.0).log2() } else { x };
    let pts = || series.iter().flat_map(|s| s.points.iter().copied()).filter(|(x, y)| x.is_finite() && y.is_finite());
    let (x0, x1) = x_bounds(pts(), tx, x_axis, categories.len());
    let ymax = pts().map(|(_, y)| y).fold(0.0, f64::max);
    let ymin_pos = pts().map(|(_, y)| y).filter(|y| *y > 0.0).fold(f64::INFINITY, f64::min);
    let panel = series.len() > INLINE_LEGEND_MAX;
    let (plot, side) = if panel {
        let (a, b) = root.split_horizontally((SIZE.0 * 68 / 100) as i32);
        (a, Some(b))
    } else {
        (root.clone(), None)
    };
    if let Some(side) = &side {
        legend_panel(side, series)?;
    }
    let mut builder = ChartBuilder::on(&plot);
    let chart = builder.caption(title, (FAMILY, 22)).margin(12).x_label_area_size(48).y_label_area_size(72);
    let x_fmt = |v: &f64| x_tick(*v, x_axis, categories);
    let x_labels = match x_axis {
        XAxis::Linear => 10,
        _ => ((x1 - x0).ceil() as usize + 1).min(40),
    };
    if y_log {
        let lo = if ymin_pos.is_finite() { ymin_pos / 2.0 } else { 0.1 };
        let hi = (ymax * 2.0).max(lo * 10.0);
        let mut c = chart.build_cartesian_2d(x0..x1, (lo..hi).log_scale())?;
        c.configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .x_labels(x_labels)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&|v| fmt_num(*v))
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 15))
            .draw()?;
        for s in series {
            let p: Vec<(f64, f64)> = s.points.iter().filter(|(_, y)| *y > 0.0).map(|&(x, y)| (tx(x), y)).collect();
            draw_line(&mut c, s, p, true)?;
        }
        if !panel {
            inline_legend(&mut c, SeriesLabelPosition::UpperLeft)?;
        }
    } else {
        let mut c = chart.build_cartesian_2d(x0..x1, 0.0..nice_max(ymax))?;
        c.configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .x_labels(x_labels)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&|v| fmt_num(*v))
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 15))
            .draw()?;
        let many = series.iter().map(|s| s.points.len()).max().unwrap_or(0) > 60;
        for s in series {
            let p: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), y)).collect();
            draw_line(&mut c, s, p, !many)?;
        }
        if !panel {
            inline_legend(&mut c, SeriesLabelPosition::LowerRight)?;
        }
    }
    Ok(())
}

/// The x range of a line chart: the (transformed by `tx`) x of the finite
/// points `pts`, at least 1 wide; a category axis of `categories`
/// categories spans them with a margin.
fn x_bounds(pts: impl Iterator<Item = (f64, f64)>, tx: impl Fn(f64) -> f64, x_axis: XAxis, categories: usize) -> (f64, f64) {
    let (mut x0, mut x1) = pts.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (x, _)| (a.min(tx(x)), b.max(tx(x))));
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if x_axis == XAxis::Categories {
        (x0, x1) = (-0.3, (categories.max(1) as f64) - 0.7);
    }
    (x0, x1)
}

/// The label of x tick `v` (empty between whole steps of a size or
/// category axis).
fn x_tick(v: f64, x_axis: XAxis, categories: &[String]) -> String {
    match x_axis {
        XAxis::Linear => fmt_num(v),
        XAxis::Log2Size => {
            if (v - v.round()).abs() < 1e-6 {
                fmt_size(2f64.powf(v.round()) as u64)
            } else {
                String::new()
            }
        }
        XAxis::Categories => {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 {
                categories.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        }
    }
}

/// Draws series `s` at points `p` (dashed where it is), labelled for the
/// legend, with a dot on each point when `dots`.
fn draw_line<DB: DrawingBackend, CT: CoordTranslate<From = (f64, f64)>>(
    c: &mut ChartContext<'_, DB, CT>,
    s: &Series,
    p: Vec<(f64, f64)>,
    dots: bool,
) -> DrawResult<DB> {
    let st = ShapeStyle::from(color(s.color)).stroke_width(2);
    let legend = |c: usize, dashed: bool| {
        move |(x, y): (i32, i32)| {
            let st = ShapeStyle::from(color(c)).stroke_width(if dashed { 1 } else { 2 });
            PathElement::new(vec![(x, y), (x + 24, y)], st)
        }
    };
    if s.dashed {
        c.draw_series(DashedLineSeries::new(p.clone(), 8, 5, st))?.label(&s.name).legend(legend(s.color, true));
    } else {
        c.draw_series(LineSeries::new(p.clone(), st))?.label(&s.name).legend(legend(s.color, false));
    }
    if dots {
        c.draw_series(p.iter().map(|&pt| Circle::new(pt, 3, color(s.color).filled())))?;
    }
    Ok(())
}

/// The legend inside the plot, at `pos`.
fn inline_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(c: &mut ChartContext<'a, DB, CT>, pos: SeriesLabelPosition) -> DrawResult<DB> {
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font((FAMILY, 14))
        .position(pos)
        .draw()
}

/// A legend in its own panel: a line sample (dashed where the series is)
/// and the name, one per row.
fn legend_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, series: &[Series]) -> DrawResult<DB> {
    let style = TextStyle::from((FAMILY, 14).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    let rows = series.len().max(1) as i32;
    let step = ((SIZE.1 as i32 - 80) / rows).clamp(12, 22);
    for (i, s) in series.iter().enumerate() {
        let y = 50 + i as i32 * step;
        let st = ShapeStyle::from(color(s.color)).stroke_width(2);
        if s.dashed {
            for k in 0..3 {
                area.draw(&PathElement::new(vec![(8 + k * 10, y), (14 + k * 10, y)], st))?;
            }
        } else {
            area.draw(&PathElement::new(vec![(8, y), (34, y)], st))?;
        }
        area.draw_text(&s.name, &style, (42, y))?;
    }
    Ok(())
}

fn draw_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> DrawResult<DB> {
    let n = categories.len().max(1) as f64;
    let ymax = series.iter().flat_map(|(_, v)| v.iter().copied()).filter(|v| v.is_finite()).fold(0.0, f64::max);
    let mut c = ChartBuilder::on(root)
        .caption(title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(190)
        .build_cartesian_2d(0.0..nice_max(ymax) * 1.08, 0.0..n)?;
    c.configure_mesh()
        .x_desc(x_label)
        .disable_y_mesh()
        .y_labels(0)
        .x_label_formatter(&|v| fmt_num(*v))
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 15))
        .draw()?;
    let groups = series.len().max(1) as f64;
    let h = 0.8 / groups;
    for (g, (name, values)) in series.iter().enumerate() {
        let col = color(g);
        c.draw_series(values.iter().enumerate().map(|(i, &v)| {
            // Row 0 at the top, as CrystalDiskMark lists its tests.
            let top = n - i as f64 - 0.1 - g as f64 * h;
            Rectangle::new([(0.0, top - h), (if v.is_finite() { v } else { 0.0 }, top)], col.filled())
        }))?
        .label(name)
        .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], col.filled()));
        c.draw_series(values.iter().enumerate().map(|(i, &v)| {
            let top = n - i as f64 - 0.1 - g as f64 * h;
            Text::new(format!(" {}", fmt_num(v)), (if v.is_finite() { v } else { 0.0 }, top - h / 2.0), TextStyle::from((FAMILY, 14).into_font()).pos(Pos::new(HPos::Left, VPos::Center)))
        }))?;
    }
    // Row names left of the plot, centred on their group.
    let style = TextStyle::from((FAMILY, 14).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
    for (i, name) in categories.iter().enumerate() {
        let (px, py) = c.backend_coord(&(0.0, n - i as f64 - 0.5));
        root.draw_text(name, &style, (px - 8, py))?;
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font((FAMILY, 14))
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    Ok(())
}

/// ATTO-style chart: read (solid) and write (dashed) MB/s against transfer
/// size, one pair of lines per target. None when no target ran ATTO.
pub fn atto_chart(targets: &[TargetReport]) -> Result<Option<Chart>> {
    let mut series = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let Some(a) = &t.atto else { continue };
        let read: Vec<(f64, f64)> = a.points.iter().filter_map(|p| p.read.map(|r| (p.size as f64, r.mbps))).collect();
        let write: Vec<(f64, f64)> = a.points.iter().filter_map(|p| p.write.map(|w| (p.size as f64, w.mbps))).collect();
        if !write.is_empty() {
            series.push(Series { name: format!("{} write", t.label), points: write, dashed: true, color: i });
        }
        if !read.is_empty() {
            series.push(Series { name: format!("{} read", t.label), points: read, dashed: false, color: i });
        }
    }
    if series.is_empty() {
        return Ok(None);
    }
    let spec = Spec::Lines {
        x_label: "transfer size (bytes, log scale)".into(),
        y_label: "MB/s (10^6 bytes/s)".into(),
        x_axis: XAxis::Log2Size,
        categories: vec![],
        y_log: false,
        series,
    };
    render("atto", "ATTO: MB/s against transfer size (QD4; read solid, write dashed)", spec).map(Some)
}

/// CrystalDiskMark-style bars: one row per test, one bar per target, for
/// the tests judged by `metric`. None when no test has that metric.
pub fn bars_chart(targets: &[TargetReport], metric: Metric, stat: Stat) -> Result<Option<Chart>> {
    let Some(first) = targets.first() else { return Ok(None) };
    let tests: Vec<_> = first.tests.iter().filter(|r| r.metric == metric).map(|r| r.test).collect();
    if tests.is_empty() {
        return Ok(None);
    }
    let categories = tests.iter().map(|t| t.to_string()).collect();
    let series = targets
        .iter()
        .map(|t| {
            let v = tests
                .iter()
                .map(|test| t.tests.iter().find(|r| r.test == *test).map(|r| r.headline(stat)).unwrap_or(0.0))
                .collect();
            (t.label.clone(), v)
        })
        .collect();
    let (name, title) = match metric {
        Metric::Mbps => ("bars-mbps", format!("Transfer tests, MB/s ({stat} of the runs)")),
        Metric::Iops => ("bars-iops", format!("Random tests, IOPS ({stat} of the runs)")),
        Metric::LatencyMs => ("bars-access", format!("Access time, ms ({stat} of the runs; lower is better)")),
    };
    render(name, &title, Spec::Bars { x_label: format!("{} ({stat})", metric.unit()), categories, series }).map(Some)
}

/// Linear surface: MB/s against position, one line per target and pass.
pub fn surface_chart(targets: &[TargetReport]) -> Result<Option<Chart>> {
    let mut series = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        for s in &t.surfaces {
            series.push(surface_series(&t.label, s, i));
        }
    }
    if series.is_empty() {
        return Ok(None);
    }
    let gib = targets.iter().flat_map(|t| t.surfaces.iter()).any(|s| s.len >= 1 << 30);
    let unit = if gib { 1u64 << 30 } else { 1 << 20 };
    for s in &mut series {
        for p in &mut s.points {
            p.0 /= unit as f64;
        }
    }
    let spec = Spec::Lines {
        x_label: format!("position ({} from the start)", if gib { "GiB" } else { "MiB" }),
        y_label: "MB/s (10^6 bytes/s)".into(),
        x_axis: XAxis::Linear,
        categories: vec![],
        y_log: false,
        series,
    };
    render("linear", "Linear surface: MB/s against position (1 MiB blocks, QD1)", spec).map(Some)
}

fn surface_series(label: &str, s: &Surface, color: usize) -> Series {
    let points = s.points.iter().map(|p| (p.pos as f64, p.mbps)).collect();
    Series { name: format!("{label} {}", s.dir), points, dashed: s.dir.writes(), color }
}

/// Latency percentiles (log scale) of every test of one target, p50 to
/// p99.99, from the run `stat` picks.
pub fn latency_chart(t: &TargetReport, index: usize, stat: Stat) -> Result<Option<Chart>> {
    if t.tests.is_empty() {
        return Ok(None);
    }
    let series = t
        .tests
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let lat = r.run_for(stat).lat.percentiles();
            Series {
                name: r.test.to_string(),
                points: lat.iter().enumerate().map(|(k, &v)| (k as f64, v)).collect(),
                dashed: r.test.dir.writes() && !r.test.dir.reads(),
                color: i,
            }
        })
        .collect();
    let spec = Spec::Lines {
        x_label: "percentile".into(),
        y_label: "latency (µs, log scale)".into(),
        x_axis: XAxis::Categories,
        categories: PERCENTILES.iter().map(|p| p.0.to_string()).collect(),
        y_log: true,
        series,
    };
    render(&format!("latency-{}", index + 1), &format!("Latency percentiles: {}", t.label), spec).map(Some)
}

/// Every chart of a report, in the order the HTML shows them.
pub fn report_charts(targets: &[TargetReport], stat: Stat) -> Result<Vec<Chart>> {
    let mut v = Vec::new();
    v.extend(bars_chart(targets, Metric::Mbps, stat)?);
    v.extend(bars_chart(targets, Metric::Iops, stat)?);
    v.extend(bars_chart(targets, Metric::LatencyMs, stat)?);
    v.extend(atto_chart(targets)?);
    v.extend(surface_chart(targets)?);
    for (i, t) in targets.iter().enumerate() {
        v.extend(latency_chart(t, i, stat)?);
    }
    Ok(v)
}

/// Writes `<name>.png` and `<name>.svg` of each chart into `dir`.
///
/// Errors: `Io` naming the file that could not be written.
pub fn write_charts(charts: &[Chart], dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("cannot create the chart directory", dir, e))?;
    let mut files = Vec::new();
    for c in charts {
        for (ext, bytes) in [("png", c.png.as_slice()), ("svg", c.svg.as_bytes())] {
            let p = dir.join(format!("{}.{ext}", c.name));
            std::fs::write(&p, bytes).map_err(|e| Error::io("cannot write chart", &p, e))?;
            files.push(p);
        }
    }
    Ok(files)
}

/// Decodes a PNG file's contents and returns its (width, height) in
/// pixels. Errors: `InvalidInput` when it is not a valid PNG.
pub fn png_size(bytes: &[u8]) -> Result<(u32, u32)> {
    if !bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Err(Error::new(ErrorKind::InvalidInput, "not a PNG file (bad signature)"));
    }
    let img = image::load_from_memory_with_format(bytes, image::ImageFormat::Png)
        .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("not a valid PNG: {e}")))?;
    Ok((img.width(), img.height()))
}

/// Parses an SVG document and returns the text of its `<text>` elements
/// (titles, axis labels, legend entries). Errors: `InvalidInput` when it
/// is not well-formed XML with an `<svg>` root.
pub fn svg_texts(svg: &str) -> Result<Vec<String>> {
    let doc = roxmltree::Document::parse(svg).map_err(|e| Error::new(ErrorKind::InvalidInput, format!("not well-formed SVG: {e}")))?;
    if !doc.root_element().has_tag_name("svg") {
        return Err(Error::new(ErrorKind::InvalidInput, "the root element is not <svg>"));
    }
    Ok(doc.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).map(str::to_string).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_png_and_svg_with_series() {
        let spec = Spec::Lines {
            x_label: "size".into(),
            y_label: "MB/s".into(),
            x_axis: XAxis::Log2Size,
            categories: vec![],
            y_log: false,
            series: vec![
                Series { name: "alpha read".into(), points: vec![(512.0, 10.0), (4096.0, 80.0), (1048576.0, 250.0)], dashed: false, color: 0 },
                Series { name: "alpha write".into(), points: vec![(512.0, 8.0), (4096.0, 60.0), (1048576.0, 240.0)], dashed: true, color: 0 },
            ],
        };
        let c = render("t", "Test chart", spec).unwrap();
        assert_eq!(png_size(&c.png).unwrap(), SIZE);
        assert!(png_size(b"\x89PNG\r\n\x1a\nxx").is_err());
        assert!(svg_texts("<svg><text>a</svg>").is_err());
        let texts = svg_texts(&c.svg).unwrap();
        for want in ["alpha read", "alpha write", "Test chart", "4K", "1M"] {
            assert!(texts.iter().any(|t| t.contains(want)), "{want} not among {texts:?}");
        }
        let bars = Spec::Bars {
            x_label: "MB/s".into(),
            categories: vec!["SEQ1M Q8T1 read".into(), "SEQ1M Q8T1 write".into()],
            series: vec![("one".into(), vec![250.0, 240.0]), ("array".into(), vec![1000.0, 950.0])],
        };
        let c = render("b", "Bars", bars).unwrap();
        let doc = roxmltree::Document::parse(&c.svg).unwrap();
        let rects = doc.descendants().filter(|n| n.has_tag_name("rect")).count();
        assert!(rects >= 4, "{rects} rectangles");
        let texts: Vec<&str> = doc.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).collect();
        assert!(texts.iter().any(|t| t.contains("SEQ1M Q8T1 write")), "{texts:?}");
    }
}
