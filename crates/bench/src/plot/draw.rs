//! Drawing a [`Chart`] with `plotters`' SVG backend: lines or bars on the left, the legend in a
//! column of its own on the right (so it never covers a point), category names wrapped under
//! their bars.

use super::{Chart, Series};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const W: u32 = 780;
const H: u32 = 460;
/// The legend's column.
const LEGEND: u32 = 210;
/// Pixels a character of 12-px sans-serif takes, about: for wrapping names.
const CHAR_PX: f64 = 6.5;
/// Of each category's width, the part its bars take.
const GROUP: f64 = 0.8;
const PALETTE: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
];

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// The chart as an SVG document.
pub(super) fn svg(chart: &Chart) -> anyhow::Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (W, H)).into_drawing_area();
        root.fill(&WHITE)?;
        let body = root.titled(&chart.title, ("sans-serif", 16))?;
        let (plot, legend) = body.split_horizontally(W - LEGEND);
        let colours = Colours::of(chart);
        if chart.is_bars() {
            bars(chart, &root, &plot, &colours)?;
        } else {
            lines(chart, &plot, &colours)?;
        }
        draw_legend(chart, &legend, &colours)?;
        root.present()?;
    }
    Ok(out)
}

/// Each of our series a palette colour in order; each paper series its namesake's.
struct Colours {
    ours: Vec<RGBColor>,
    paper: Vec<RGBColor>,
}

impl Colours {
    fn of(chart: &Chart) -> Colours {
        let ours: Vec<RGBColor> =
            (0..chart.series.len()).map(|i| PALETTE[i % PALETTE.len()]).collect();
        let mut spare = chart.series.len();
        let paper = chart
            .paper
            .iter()
            .map(|p| match namesake(chart, p) {
                Some(i) => ours[i],
                None => {
                    spare += 1;
                    PALETTE[(spare - 1) % PALETTE.len()]
                }
            })
            .collect();
        Colours { ours, paper }
    }
}

/// The series of ours a paper series is set against: the one of the same name, case aside.
fn namesake(chart: &Chart, paper: &Series) -> Option<usize> {
    chart.series.iter().position(|s| s.name.eq_ignore_ascii_case(&paper.name))
}

/// A tick label: round numbers plainly, very large or small ones in exponent form.
fn fmt(v: &f64) -> String {
    let v = *v;
    if v != 0.0 && (v.abs() >= 1e6 || v.abs() < 1e-3) {
        format!("{v:.1e}")
    } else if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{}", (v * 1000.0).round() / 1000.0)
    }
}

/// `[lo, hi]` of the y axis: zero and every finite value in it, a little room above; a flat
/// or empty chart gets a unit range.
fn y_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (0f64, 0f64);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if hi <= lo {
        hi = lo + 1.0;
    }
    (lo, hi + (hi - lo) * 0.08)
}

/// The points of `s` that can be drawn: a value that is not a number or infinite (a ratio to
/// a zero baseline) is left out, a gap in its line.
fn finite(s: &Series) -> impl Iterator<Item = (f64, f64)> + Clone + '_ {
    s.points.iter().copied().filter(|p| p.0.is_finite() && p.1.is_finite())
}

fn lines(chart: &Chart, plot: &Area<'_>, colours: &Colours) -> anyhow::Result<()> {
    let all = chart.series.iter().chain(&chart.paper).flat_map(finite);
    let (mut x0, mut x1) = (f64::MAX, f64::MIN);
    for (x, _) in all.clone() {
        x0 = x0.min(x);
        x1 = x1.max(x);
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    x0 = x0.min(0.0);
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    // A little room right of the largest x, as y_range leaves above: a point there is drawn
    // whole instead of cut by the plot's edge.
    x1 += (x1 - x0) * 0.04;
    let (y0, y1) = y_range(all.map(|p| p.1));
    let mut ctx = ChartBuilder::on(plot)
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    ctx.configure_mesh()
        .light_line_style(WHITE)
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .x_label_formatter(&fmt)
        .y_label_formatter(&fmt)
        .draw()?;
    for (s, &c) in chart.series.iter().zip(&colours.ours) {
        ctx.draw_series(LineSeries::new(finite(s), c.stroke_width(2)))?;
        ctx.draw_series(finite(s).map(|p| Circle::new(p, 3, c.filled())))?;
    }
    for (s, &c) in chart.paper.iter().zip(&colours.paper) {
        ctx.draw_series(DashedLineSeries::new(finite(s), 6, 4, c.stroke_width(2)))?;
        ctx.draw_series(finite(s).map(|p| Circle::new(p, 4, c.stroke_width(2))))?;
    }
    Ok(())
}

/// A series drawn in a bar slot: one of the paper's (`paper`) or one of ours, by index.
#[derive(Clone, Copy)]
struct Member {
    paper: bool,
    i: usize,
}

/// The slots of a category, left to right, each the series it draws (bottom of a stack first):
/// each series of ours with the paper's namesake right beside it (the paper's others after),
/// or, stacked, all of ours then all of the paper's.
fn slots(chart: &Chart) -> Vec<Vec<Member>> {
    let ours = |i| Member { paper: false, i };
    let paper = |i| Member { paper: true, i };
    if chart.stacked {
        let mut v = vec![(0..chart.series.len()).map(ours).collect()];
        if !chart.paper.is_empty() {
            v.push((0..chart.paper.len()).map(paper).collect());
        }
        return v;
    }
    let mut v = Vec::new();
    for i in 0..chart.series.len() {
        v.push(vec![ours(i)]);
        let paired = chart.paper.iter().enumerate().filter(|(_, p)| namesake(chart, p) == Some(i));
        v.extend(paired.map(|(j, _)| vec![paper(j)]));
    }
    for (j, p) in chart.paper.iter().enumerate() {
        if namesake(chart, p).is_none() {
            v.push(vec![paper(j)]);
        }
    }
    v
}

/// The value of `series` at category `x`, if it has a finite one.
fn at(series: &Series, x: usize) -> Option<f64> {
    finite(series).find(|p| p.0.round() as i64 == x as i64).map(|p| p.1)
}

/// Category names broken into lines of at most `width` characters at spaces.
fn wrap(name: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in name.split_whitespace() {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 1 + word.chars().count() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// One bar, or one part of a stack: its left edge and width in category units, the heights
/// it spans, and how it is drawn.
struct Bar {
    left: f64,
    width: f64,
    lo: f64,
    hi: f64,
    style: ShapeStyle,
}

/// Every bar of `chart`, category by category and slot by slot: a stacked part starts where
/// the part below it ended (a negative one comes back down).
fn layout(chart: &Chart, colours: &Colours) -> Vec<Bar> {
    let slots = slots(chart);
    let width = GROUP / slots.len().max(1) as f64;
    let mut out = Vec::new();
    for x in 0..chart.x_names.len() {
        for (k, slot) in slots.iter().enumerate() {
            let left = x as f64 - GROUP / 2.0 + k as f64 * width;
            let mut base = 0.0;
            for &Member { paper, i } in slot {
                let (s, c) = match paper {
                    true => (&chart.paper[i], colours.paper[i]),
                    false => (&chart.series[i], colours.ours[i]),
                };
                let Some(v) = at(s, x) else { continue };
                let style = if paper { c.stroke_width(2) } else { c.filled() };
                let (lo, hi) = if chart.stacked { (base, base + v) } else { (0.0, v) };
                out.push(Bar { left, width: width * 0.92, lo, hi, style });
                base += v;
            }
        }
    }
    out
}

fn bars(chart: &Chart, root: &Area<'_>, plot: &Area<'_>, colours: &Colours) -> anyhow::Result<()> {
    let n = chart.x_names.len();
    let bars = layout(chart, colours);
    let (y0, y1) = y_range(bars.iter().map(|b| b.hi));
    let group_px = (f64::from(W - LEGEND) - 100.0) / n as f64;
    let width = ((group_px / CHAR_PX) as usize).max(6);
    let names: Vec<Vec<String>> = chart.x_names.iter().map(|s| wrap(s, width)).collect();
    let rows = names.iter().map(Vec::len).max().unwrap_or(1) as u32;
    let mut ctx = ChartBuilder::on(plot)
        .margin(12)
        .x_label_area_size(24 + 14 * rows)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), y0..y1)?;
    ctx.configure_mesh()
        .disable_x_mesh()
        .light_line_style(WHITE)
        .x_labels(0)
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .y_label_formatter(&fmt)
        .draw()?;
    ctx.draw_series(
        bars.iter().map(|b| Rectangle::new([(b.left, b.lo), (b.left + b.width, b.hi)], b.style)),
    )?;
    let label = ("sans-serif", 12).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Top));
    for (x, lines) in names.iter().enumerate() {
        let (px, py) = ctx.backend_coord(&(x as f64, y0));
        for (r, line) in lines.iter().enumerate() {
            root.draw(&Text::new(line.as_str(), (px, py + 6 + 14 * r as i32), label.clone()))?;
        }
    }
    Ok(())
}

fn draw_legend(chart: &Chart, area: &Area<'_>, colours: &Colours) -> anyhow::Result<()> {
    let font = ("sans-serif", 12).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
    let mut y = 30;
    let bars = chart.is_bars();
    let entries =
        chart.series.iter().zip(&colours.ours).map(|(s, &c)| (s.name.clone(), c, false)).chain(
            chart
                .paper
                .iter()
                .zip(&colours.paper)
                .map(|(s, &c)| (format!("paper: {}", s.name), c, true)),
        );
    for (name, c, paper) in entries {
        let swatch = if paper { c.stroke_width(2) } else { c.filled() };
        if bars {
            area.draw(&Rectangle::new([(12, y - 6), (26, y + 6)], swatch))?;
        } else if paper {
            area.draw(&PathElement::new(vec![(8, y), (16, y)], c.stroke_width(2)))?;
            area.draw(&PathElement::new(vec![(22, y), (30, y)], c.stroke_width(2)))?;
        } else {
            area.draw(&PathElement::new(vec![(8, y), (30, y)], c.stroke_width(2)))?;
        }
        let lines = wrap(&name, 26);
        for line in &lines {
            area.draw(&Text::new(line.as_str(), (36, y), font.clone()))?;
            y += 14;
        }
        y += 20 - 14 * i32::from(!lines.is_empty());
    }
    Ok(())
}
