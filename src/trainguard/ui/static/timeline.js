// The fault timeline of a job, drawn as SVG: one lane per pod (its states over time), each fault marked on its
// pod's lane (hover for what was done and how long the recovery took), each scale step a dashed line.
// Input: the "timeline" of /api/jobs/<name> (trainguard.observability.timeline, the same as `trainguard plot`).

const SVG = "http://www.w3.org/2000/svg";
const LANE = 22;
const LEFT = 170;
const TOP = 22;

function node(tag, attrs = {}, text = null) {
  const element = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) element.setAttribute(key, String(value));
  if (text !== null) element.textContent = text;
  return element;
}

function seconds(value) {
  if (value < 10) return `${value.toFixed(1)} s`;
  return value < 90 ? `${Math.round(value)} s` : value < 5400 ? `${Math.round(value / 60)} min` : `${(value / 3600).toFixed(1)} h`;
}

export function drawTimeline(timeline, width = 1100) {
  const lanes = timeline.lanes || [];
  const height = TOP + lanes.length * LANE + 24;
  const svg = node("svg", { class: "timeline", viewBox: `0 0 ${width} ${height}`, role: "img" });
  svg.appendChild(node("title", {}, `fault timeline of ${timeline.job}`));
  const span = Math.max(timeline.end - timeline.start, 1e-6);
  const x = (t) => LEFT + ((t - timeline.start) / span) * (width - LEFT - 10);
  for (let i = 0; i <= 5; i += 1) {
    const at = timeline.start + (span * i) / 5;
    svg.appendChild(node("line", { class: "axis", x1: x(at), x2: x(at), y1: TOP - 6, y2: height - 18 }));
    const anchor = i === 0 ? "start" : i === 5 ? "end" : "middle";
    svg.appendChild(node("text", { x: x(at), y: height - 4, "text-anchor": anchor }, seconds(at - timeline.start)));
  }
  lanes.forEach((lane, row) => {
    const y = TOP + row * LANE;
    const short = lane.pod.startsWith(`${timeline.job}-`) ? lane.pod.slice(timeline.job.length + 1) : lane.pod;
    const label = node("text", { x: 4, y: y + 14 }, short);
    label.appendChild(node("title", {}, lane.pod));
    svg.appendChild(label);
    for (const segment of lane.segments) {
      const rect = node("rect", {
        class: segment.state, x: x(segment.start), y: y + 3,
        width: Math.max(x(segment.end) - x(segment.start), 1), height: LANE - 6,
      });
      rect.appendChild(node("title", {}, `${lane.pod}: ${segment.state}, ${seconds(segment.end - segment.start)}`));
      svg.appendChild(rect);
    }
  });
  const laneOf = new Map(lanes.map((lane, row) => [lane.pod, row]));
  for (const fault of timeline.faults || []) {
    const row = laneOf.get(fault.pod);
    if (row === undefined) continue;
    const cx = x(fault.at);
    const y = TOP + row * LANE + 3;
    const mark = node("path", { class: "fault", d: `M${cx - 5},${y} L${cx + 5},${y} L${cx},${y + 9} Z` });
    mark.appendChild(node("title", {}, `${fault.pod}: ${fault.label}`));
    svg.appendChild(mark);
  }
  for (const step of timeline.scale_steps || []) {
    const line = node("line", { class: "scale", x1: x(step.at), x2: x(step.at), y1: TOP - 8, y2: height - 18 });
    line.appendChild(node("title", {}, `scale: ${step.label}`));
    svg.appendChild(line);
    const right = x(step.at) > width - 120;  // near the end: the label to the left of its line
    svg.appendChild(node("text", { x: x(step.at) + (right ? -3 : 3), y: TOP - 10, "text-anchor": right ? "end" : "start" }, step.label));
  }
  return svg;
}
