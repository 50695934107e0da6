//! `distrun report --plot FILE.svg|FILE.png`: one chart per family present, stacked in one file:
//! collectives' busbw (GB/s) against size (bytes), matmul's TFLOP/s against m*n*k, FFT's time
//! (us) against its global shape's elements; each x axis log2-scaled. One series per run
//! directory, step and swept value that is not a size (a key path without `shape`).
//!
//! Text needs a TrueType font: `DISTRUN_FONT`, else DejaVu Sans where Debian's
//! `fonts-dejavu-core` (or another distribution) puts it. A PNG cannot do without one; an SVG
//! names its font family and leaves drawing the text to its viewer, sizing labels by estimate
//! where no font is found.

use super::Run;
use super::format::letter;
use super::rows::{Family, Row, swept_columns};
use anyhow::{Context, anyhow};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{self, HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A plot's file kind, by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `.svg`
    Svg,
    /// `.png`
    Png,
}

impl Kind {
    /// The kind of a path ending `.svg` or `.png` (any case).
    pub fn of(path: &Path) -> Option<Kind> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "svg" => Some(Kind::Svg),
            "png" => Some(Kind::Png),
            _ => None,
        }
    }
}

/// Width of the file and height of each chart, pixels.
const SIZE: (u32, u32) = (1000, 480);

/// Where a font is looked for when `DISTRUN_FONT` is not set.
const FONTS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
];

/// One chart: its series and how its axes read.
#[derive(Debug)]
struct Chart {
    title: &'static str,
    x_desc: &'static str,
    y_desc: &'static str,
    x_label: fn(f64) -> String,
    y_log: bool,
    series: Vec<Series>,
}

/// One line of a chart: its legend and points (x ascending).
#[derive(Debug)]
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
}

/// Whether a plot can be drawn into `path`: its kind, and for a PNG a font.
pub fn ready(path: &Path) -> anyhow::Result<Kind> {
    let kind = Kind::of(path).ok_or_else(|| anyhow!("{}: not .svg or .png", path.display()))?;
    if let (Kind::Png, Err(looked)) = (kind, font()) {
        anyhow::bail!(
            "a PNG plot needs a TrueType font and none was found ({looked}): install Debian's \
             fonts-dejavu-core (apt-get install fonts-dejavu-core), set DISTRUN_FONT=FILE.ttf, \
             or plot to an .svg"
        );
    }
    Ok(kind)
}

/// Draws the charts of `rows` into `path` (`.svg` or `.png`).
pub fn plot(runs: &[Run], rows: &[Row], path: &Path) -> anyhow::Result<()> {
    let kind = ready(path)?;
    let charts = charts(runs, rows);
    anyhow::ensure!(
        !charts.is_empty(),
        "nothing to plot into {}: no collective, matmul or FFT step has figures to plot",
        path.display()
    );
    let size = (SIZE.0, SIZE.1 * charts.len() as u32);
    let drawn = match kind {
        Kind::Svg => draw(
            Svg(SVGBackend::new(path, size)).into_drawing_area(),
            &charts,
        ),
        Kind::Png => {
            let mut pixels = vec![0u8; size.0 as usize * size.1 as usize * 3];
            draw(
                BitMapBackend::with_buffer(&mut pixels, size).into_drawing_area(),
                &charts,
            )
            .map(|()| write_png(path, size, &pixels))
            .and_then(|written| written.map_err(|e| format!("{e:#}")))
        }
    };
    drawn.map_err(|e| anyhow!("cannot plot into {}: {e}", path.display()))
}

/// An RGB image as a PNG file.
fn write_png(path: &Path, (w, h): (u32, u32), pixels: &[u8]) -> anyhow::Result<()> {
    let file = std::fs::File::create(path).context("cannot create it")?;
    let mut png = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    png.set_color(png::ColorType::Rgb);
    png.set_depth(png::BitDepth::Eight);
    let mut writer = png.write_header()?;
    writer.write_image_data(pixels)?;
    writer.finish()?;
    Ok(())
}

/// Registers plotters' sans-serif font once: `DISTRUN_FONT` where set, else the first of
/// [`FONTS`] found. Err says where it looked.
fn font() -> Result<(), String> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let places: Vec<PathBuf> = match std::env::var_os("DISTRUN_FONT") {
            Some(p) => vec![p.into()],
            None => FONTS.iter().map(PathBuf::from).collect(),
        };
        for p in &places {
            if let Ok(bytes) = std::fs::read(p) {
                // plotters keeps fonts for the whole process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        let looked: Vec<String> = places.iter().map(|p| p.display().to_string()).collect();
        Err(format!("looked at {}", looked.join(", ")))
    })
    .clone()
}

/// The charts of the families present, in the order collectives, matmul, FFT.
fn charts(runs: &[Run], rows: &[Row]) -> Vec<Chart> {
    let collective = Chart {
        title: "collectives: bus bandwidth",
        x_desc: "size (bytes)",
        y_desc: "busbw (GB/s)",
        x_label: bytes_label,
        y_log: false,
        series: series(runs, rows, |r| match Family::of(&r.step.op) {
            Family::Collective(_) => r.step.figures.bytes.zip(r.step.busbw_gbs),
            _ => None,
        }),
    };
    let matmul = Chart {
        title: "matmul: throughput",
        x_desc: "m*n*k",
        y_desc: "TFLOP/s",
        x_label: count_label,
        y_log: false,
        series: series(runs, rows, |r| {
            let f = &r.step.figures;
            let mnk = f.m? * f.n? * f.k?;
            (r.step.op == "matmul").then_some(mnk).zip(r.step.tflops)
        }),
    };
    let fft = Chart {
        title: "fft: time",
        x_desc: "elements (global shape)",
        y_desc: "time (us, median)",
        x_label: count_label,
        y_log: true,
        series: series(runs, rows, |r| {
            let elements = r.step.figures.shape.as_ref()?.iter().product();
            let us = r.step.time_s.median * 1e6;
            (r.step.op == "fft" && us > 0.0).then_some((elements, us))
        }),
    };
    [collective, matmul, fft]
        .into_iter()
        .filter(|c| !c.series.is_empty())
        .collect()
}

/// The series of the rows `point` gives (x, y) for: one per run, step and swept values that
/// are not sizes; labeled by the run's directory name (its letter where two share one), the
/// step (and its op where the name does not say it) and those values.
fn series(runs: &[Run], rows: &[Row], point: impl Fn(&Row) -> Option<(u64, f64)>) -> Vec<Series> {
    let columns = swept_columns(rows);
    let names: Vec<String> = (runs.iter())
        .map(|r| r.dir.file_name().unwrap_or(r.dir.as_os_str()))
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    let mut out: Vec<Series> = Vec::new();
    for row in rows {
        let Some((x, y)) = point(row).filter(|p| p.0 > 0) else {
            continue;
        };
        let run = &names[row.run];
        let mut label = match names.iter().filter(|n| *n == run).count() {
            1 => format!("{run} {}", row.step.name),
            _ => format!("{} {}", letter(row.run), row.step.name),
        };
        if !row.step.name.contains(&row.step.op) {
            label.push_str(&format!(" ({})", row.step.op));
        }
        for (path, value) in row.values {
            if !path.contains("shape") {
                let value = match value {
                    serde_json::Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                label.push_str(&format!(" {}={value}", columns[path]));
            }
        }
        let at = match out.iter().position(|s| s.label == label) {
            Some(at) => at,
            None => {
                out.push(Series {
                    label,
                    points: Vec::new(),
                });
                out.len() - 1
            }
        };
        out[at].points.push((x as f64, y));
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// Bytes on an axis: `512 B`, `4 KiB`, `1.5 MiB`.
fn bytes_label(x: f64) -> String {
    binary(x, "B")
}

/// A count on an axis: `512`, `4 Ki`, `1.5 Mi`.
fn count_label(x: f64) -> String {
    binary(x, "").trim_end().to_string()
}

/// `x` in powers of 1024 with at most one decimal, and `unit` after its prefix.
fn binary(mut x: f64, unit: &str) -> String {
    const PREFIXES: [&str; 6] = ["", "Ki", "Mi", "Gi", "Ti", "Pi"];
    let mut p = 0;
    while x >= 1024.0 && p < PREFIXES.len() - 1 {
        x /= 1024.0;
        p += 1;
    }
    let number = format!("{x:.1}");
    let number = number.strip_suffix(".0").unwrap_or(&number);
    format!("{number} {}{unit}", PREFIXES[p])
}

/// The charts stacked on `root`.
fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, charts: &[Chart]) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    for (area, chart) in root.split_evenly((charts.len(), 1)).iter().zip(charts) {
        let points = || chart.series.iter().flat_map(|s| &s.points);
        let (x_lo, x_hi) = powers_around(span(points().map(|p| p.0)), 2.0);
        // Labels at powers of 2 only: past 16 of them, at every other.
        let labels = ((x_hi / x_lo).log2() as usize).clamp(1, 16);
        let x = (x_lo..x_hi).log_scale().base(2.0);
        let (y_lo, y_hi) = span(points().map(|p| p.1));
        if chart.y_log {
            let (y_lo, y_hi) = powers_around((y_lo, y_hi), 10.0);
            draw_chart(area, chart, (x, labels), (y_lo..y_hi).log_scale())?;
        } else {
            let top = if y_hi > 0.0 { y_hi * 1.1 } else { 1.0 };
            draw_chart(area, chart, (x, labels), 0.0..top)?;
        }
    }
    root.present().map_err(|e| e.to_string())
}

/// The powers of `base` around a span of positive numbers, with a quarter of a power more on
/// each side (a whole one where the span lies on one power).
fn powers_around((lo, hi): (f64, f64), base: f64) -> (f64, f64) {
    let (mut a, mut b) = (lo.log(base).floor(), hi.log(base).ceil());
    if a == b {
        (a, b) = (a - 1.0, b + 1.0);
    }
    (base.powf(a - 0.25), base.powf(b + 0.25))
}

/// The least and greatest of some numbers.
fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

/// One chart on `area` with a log2 x axis `x` of this many labels, and the y axis `y`.
fn draw_chart<DB, X, Y>(
    area: &DrawingArea<DB, Shift>,
    chart: &Chart,
    (x, labels): (X, usize),
    y: Y,
) -> Result<(), String>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let text = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut c = ChartBuilder::on(area)
        .caption(chart.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)
        .map_err(text)?;
    c.configure_mesh()
        .x_desc(chart.x_desc)
        .y_desc(chart.y_desc)
        .x_labels(labels)
        .x_label_formatter(&|v| (chart.x_label)(*v))
        .draw()
        .map_err(text)?;
    let mut legend = Vec::new();
    for (i, s) in chart.series.iter().enumerate() {
        let line = ShapeStyle::from(Palette99::pick(i).to_rgba()).stroke_width(2);
        c.draw_series(LineSeries::new(s.points.iter().copied(), line))
            .map_err(text)?;
        c.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, line.filled())))
            .map_err(text)?;
        legend.push((s.label.as_str(), line));
    }
    draw_legend(&c.plotting_area().strip_coord_spec(), &legend).map_err(text)
}

/// The series' legend in the plot's upper left corner: a line of each one's color and its
/// label. (plotters' own legend measures its text by the font alone: an SVG without a font
/// could not have one.)
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    series: &[(&str, ShapeStyle)],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let style = TextStyle::from(("sans-serif", 14).into_font())
        .pos(text_anchor::Pos::new(HPos::Left, VPos::Center));
    let mut width = 0;
    let mut height = 0;
    for (label, _) in series {
        let (w, h) = area.estimate_text_size(label, &style)?;
        (width, height) = (width.max(w as i32), height.max(h as i32));
    }
    let (x0, y0, line_height) = (12, 12, height + 6);
    let corner = (x0 + 44 + width, y0 + 8 + line_height * series.len() as i32);
    area.draw(&Rectangle::new(
        [(x0, y0), corner],
        WHITE.mix(0.85).filled(),
    ))?;
    area.draw(&Rectangle::new([(x0, y0), corner], BLACK))?;
    for (i, (label, line)) in series.iter().enumerate() {
        let y = y0 + 4 + line_height * i as i32 + line_height / 2;
        area.draw(&PathElement::new([(x0 + 8, y), (x0 + 32, y)], *line))?;
        area.draw(&Text::new(*label, (x0 + 38, y), style.clone()))?;
    }
    Ok(())
}

/// plotters' SVG backend, sizing text by the font where one is registered and by estimate
/// (0.6 em a character) where none is: the viewer draws an SVG's text.
struct Svg<'a>(SVGBackend<'a>);

type SvgError = DrawingErrorKind<<SVGBackend<'static> as DrawingBackend>::ErrorType>;

impl DrawingBackend for Svg<'_> {
    type ErrorType = <SVGBackend<'static> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }

    fn ensure_prepared(&mut self) -> Result<(), SvgError> {
        self.0.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), SvgError> {
        self.0.present()
    }

    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Result<(), SvgError> {
        self.0.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), SvgError> {
        self.0.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), SvgError> {
        self.0.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), SvgError> {
        self.0.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), SvgError> {
        self.0.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), SvgError> {
        self.0.fill_polygon(vert, style)
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), SvgError> {
        self.0.draw_text(text, style, pos)
    }

    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> Result<(u32, u32), SvgError> {
        Ok(match style.layout_box(text) {
            Ok(((x0, y0), (x1, y1))) => ((x1 - x0) as u32, (y1 - y0) as u32),
            Err(_) => {
                let em = style.size();
                ((text.chars().count() as f64 * em * 0.6) as u32, em as u32)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::rows::rows;
    use crate::report::tests::{run_of, step, sweep_run};

    #[test]
    fn axis_labels_read_in_powers_of_1024() {
        assert_eq!(bytes_label(512.0), "512 B");
        assert_eq!(bytes_label(4096.0), "4 KiB");
        assert_eq!(bytes_label(1.5 * 1024.0 * 1024.0), "1.5 MiB");
        assert_eq!(count_label(64.0), "64");
        assert_eq!(count_label(2.0f64.powi(30)), "1 Gi");
    }

    #[test]
    fn plot_files_are_named_by_kind() {
        assert_eq!(Kind::of(Path::new("x.SVG")), Some(Kind::Svg));
        assert_eq!(Kind::of(Path::new("dir/x.png")), Some(Kind::Png));
        assert_eq!(Kind::of(Path::new("x.pdf")), None);
        assert_eq!(Kind::of(Path::new("svg")), None);
    }

    #[test]
    fn a_series_per_run_step_and_swept_value_that_is_not_a_size() {
        let a = sweep_run(
            "runs/a",
            &[(8, "f32"), (16, "f32"), (8, "bf16"), (16, "bf16")],
            &["ar", "mm"],
        );
        let mut b = run_of("other/a", vec![step("ar", "all_reduce"), step("f", "fft")]);
        b.manifest.steps[0].figures.bytes = Some(2048);
        let runs = [a, b];
        let rows = rows(&runs);
        let charts = charts(&runs, &rows);
        let titles: Vec<_> = charts.iter().map(|c| c.title).collect();
        assert_eq!(
            titles,
            [
                "collectives: bus bandwidth",
                "matmul: throughput",
                "fft: time"
            ]
        );
        let labels: Vec<_> = (charts[0].series.iter())
            .map(|s| (s.label.as_str(), s.points.len()))
            .collect();
        assert_eq!(
            labels,
            [
                ("a ar (all_reduce) dtype=f32", 2),
                ("a ar (all_reduce) dtype=bf16", 2),
                ("b ar (all_reduce)", 1)
            ],
            "two runs named a go by their letters"
        );
        assert_eq!(charts[0].series[2].points, [(2048.0, 0.22)]);
        assert_eq!(charts[1].series[0].points[0], (64.0 * 32.0 * 16.0, 1.5));
        assert_eq!(charts[2].series[0].points, [(64.0, 12.5)]);
    }

    #[test]
    fn an_svg_is_drawn_without_a_font() {
        let runs = [run_of("a", vec![step("ar", "all_reduce")])];
        let rows = rows(&runs);
        let charts = charts(&runs, &rows);
        let mut text = String::new();
        draw(
            Svg(SVGBackend::with_string(&mut text, SIZE)).into_drawing_area(),
            &charts,
        )
        .unwrap();
        assert!(text.starts_with("<svg"), "{text}");
        assert!(text.contains("a ar (all_reduce)"));
        assert!(text.contains("busbw (GB/s)"));
    }
}
