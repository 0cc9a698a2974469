#!/usr/bin/env python3
"""Writes the image fixtures for src/vision/ (decoding and preprocessing) with Pillow.

    .venv/bin/python tools/make_image_golden.py --out tests/golden/images

Small deterministic images in every format the server reads (PNG: RGB, RGBA with varying
alpha, grayscale, palette with tRNS; JPEG: RGB, grayscale, CMYK; WebP: lossless, lossy with
alpha) and one it refuses (GIF), then what the C++ code must produce from them, as raw files
described by manifest.json:
  - decode: the RGB pixels Pillow gives after transformers' convert_to_rgb (RGBA composited
    onto opaque white with Image.alpha_composite), uint8, rows top to bottom;
  - resize: Image.resize(..., LANCZOS) of a decoded image, uint8;
  - idefics3: Idefics3 preprocessing without image splitting, float32 little-endian planes
    [3][size][size]: longest edge to 4*size (transformers' rule: the other edge truncated and
    made even), LANCZOS, then LANCZOS to size x size, then (v/255 - 0.5)/0.5.
  - idefics3_views: Idefics3 preprocessing with image splitting (SmolVLM's default), as
    transformers' own Idefics3ImageProcessorPil returns it (transformers required): rows,
    cols and every view, rows*cols tiles row-major then the whole image, float32 [views][3][size]
    [size], from a raw .rgb source above. size 16, not 32: every image is split into up to
    4 x 4 tiles (17 views), 12 KiB a view at 32 would make these files ~0.5 MB.
  - idefics3_layouts: rows and cols transformers gives for real SmolVLM sizes (384, 512) and
    real image sizes (only the image's size matters, so no pixels are stored).
Resized pixels depend on the Pillow version: Pillow 13 runs the vertical pass first when the
height shrinks much more than the width (up to 2 per channel from Pillow 12's horizontal-first);
the files here were made with the Pillow pinned in requirements-test.txt.
The idefics3 arrays are also checked here against transformers' own Idefics3ImageProcessorPil
when transformers is importable, and the composite formula the C++ uses against Pillow's
alpha_composite for all 65536 (alpha, colour) pairs.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image

LANCZOS = Image.Resampling.LANCZOS


def to_rgb(im: Image.Image) -> Image.Image:
    """transformers' convert_to_rgb: everything through RGBA, composited onto opaque white."""
    rgba = im.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")


def check_composite_formula() -> None:
    a, c = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    src = np.stack([c, c, c, a], axis=-1).astype(np.uint8)
    pil = np.asarray(to_rgb(Image.fromarray(src, "RGBA")))[..., 0].astype(np.int64)
    ours = (c * a + 255 * (255 - a) + 127) // 255
    if not np.array_equal(pil, ours):
        sys.exit(f"composite formula differs from Pillow at {np.argwhere(pil != ours)[:5].tolist()}")


def idefics3_size(width: int, height: int, longest: int) -> tuple[int, int]:
    # transformers' _resize_output_size_rescale_to_max_len (images this small never reach the
    # 4096 bound of _resize_output_size_scale_below_upper_bound).
    aspect = width / height
    if width >= height:
        width, height = longest, int(longest / aspect)
        height += height % 2
    else:
        width, height = int(longest * aspect), longest
        width += width % 2
    return max(width, 1), max(height, 1)


def idefics3_pixels(rgb: Image.Image, size: int) -> np.ndarray:
    w, h = idefics3_size(rgb.width, rgb.height, 4 * size)
    square = rgb.resize((w, h), LANCZOS).resize((size, size), LANCZOS)
    x = (np.asarray(square).astype(np.float64) * (1 / 255)).astype(np.float32)
    x = (x - np.float32(0.5)) / np.float32(0.5)
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def idefics3_views(rgb: Image.Image, size: int) -> tuple[int, int, np.ndarray]:
    """Image splitting with Pillow alone, to check (and document) what transformers does."""
    w, h = idefics3_size(rgb.width, rgb.height, 4 * size)
    # resize_for_vision_encoder: the longest side up to a multiple of size, the other from the
    # float aspect ratio and the new longest side, truncated, then up to a multiple too.
    aspect, up = w / h, lambda v: -(-v // size) * size
    tw, th = (up(w), up(int(up(w) / aspect))) if w >= h else (up(int(up(h) * aspect)), up(h))
    tiled = rgb.resize((w, h), LANCZOS).resize((tw, th), LANCZOS)
    if tw <= size and th <= size:  # split_images: one frame, the image itself
        rows = cols = 0
        frames = [tiled]
    else:
        rows, cols = th // size, tw // size
        boxes = [(c * size, r * size, (c + 1) * size, (r + 1) * size) for r in range(rows) for c in range(cols)]
        frames = [tiled.crop(box) for box in boxes]  # row by row, left to right
        frames.append(tiled.resize((size, size), LANCZOS))  # the whole image last
    x = (np.stack([np.asarray(f) for f in frames]).astype(np.float64) * (1 / 255)).astype(np.float32)
    x = (x - np.float32(0.5)) / np.float32(0.5)
    return rows, cols, np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def transformers_views(rgb: Image.Image, size: int) -> tuple[int, int, np.ndarray]:
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    processor = Idefics3ImageProcessorPil(
        do_image_splitting=True, size={"longest_edge": 4 * size}, max_image_size={"longest_edge": size}
    )
    out = processor(images=[rgb], return_tensors="np", return_row_col_info=True)
    # One image: every frame is size x size, so do_pad pads nothing (the mask is all ones).
    if not np.all(out["pixel_attention_mask"] == 1):
        sys.exit("unexpected padding in a single image's frames")
    return out["rows"][0][0], out["cols"][0][0], np.asarray(out["pixel_values"])[0]


def check_against_transformers(rgb: Image.Image, size: int, ours: np.ndarray) -> None:
    try:
        from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
    except Exception as e:  # transformers is optional here
        print(f"(transformers not importable, cross-check skipped: {e})")
        return
    processor = Idefics3ImageProcessorPil(
        do_image_splitting=False, size={"longest_edge": 4 * size}, max_image_size={"longest_edge": size}
    )
    theirs = np.asarray(processor(images=[rgb], return_tensors="np")["pixel_values"])[0, 0]
    diff = np.abs(theirs - ours).max()
    if diff > 1e-6:
        sys.exit(f"idefics3 golden differs from transformers by {diff}")


def make_images(rng: np.random.Generator) -> dict[str, bytes]:
    files: dict[str, bytes] = {}

    def save(name: str, im: Image.Image, fmt: str, **kw) -> None:
        buf = io.BytesIO()
        im.save(buf, fmt, **kw)
        files[name] = buf.getvalue()

    def gradient(w: int, h: int, noise: int) -> np.ndarray:
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) * 255 // (w + h - 2)], -1)
        return np.clip(base + rng.integers(-noise, noise + 1, base.shape), 0, 255).astype(np.uint8)

    save("rgb_37x23.png", Image.fromarray(gradient(37, 23, 40), "RGB"), "PNG")
    save("tall_21x45.png", Image.fromarray(gradient(21, 45, 60), "RGB"), "PNG")
    rgba = np.concatenate([gradient(40, 40, 30), np.zeros((40, 40, 1), np.uint8)], -1)
    rgba[..., 3] = (np.arange(40 * 40).reshape(40, 40) * 7 % 256).astype(np.uint8)  # every alpha, 0 and 255 too
    save("rgba_40x40.png", Image.fromarray(rgba, "RGBA"), "PNG")
    save("gray_64x48.png", Image.fromarray(gradient(64, 48, 20)[..., 0], "L"), "PNG")
    palette = Image.fromarray(gradient(20, 12, 10), "RGB").quantize(16)
    save("palette_trns_20x12.png", palette, "PNG", transparency=3)  # palette entry 3 fully transparent
    save("rgb_50x30.jpg", Image.fromarray(gradient(50, 30, 25), "RGB"), "JPEG", quality=90)
    save("gray_24x16.jpg", Image.fromarray(gradient(24, 16, 25)[..., 1], "L"), "JPEG", quality=90)
    save("cmyk_16x16.jpg", Image.fromarray(gradient(16, 16, 10), "RGB").convert("CMYK"), "JPEG", quality=90)
    save("lossless_33x21.webp", Image.fromarray(gradient(33, 21, 30), "RGB"), "WEBP", lossless=True)
    lossy = np.concatenate([gradient(30, 20, 20), gradient(30, 20, 0)[..., :1]], -1)
    save("lossy_alpha_30x20.webp", Image.fromarray(lossy, "RGBA"), "WEBP", quality=80)
    save("gif_8x8.gif", Image.fromarray(gradient(8, 8, 0), "RGB"), "GIF")
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tests/golden/images"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    check_composite_formula()

    files = make_images(np.random.default_rng(20240611))
    for name, data in files.items():
        (args.out / name).write_bytes(data)

    manifest: dict[str, list] = {"decode": [], "refuse": [], "resize": [], "idefics3": []}
    decoded: dict[str, Image.Image] = {}
    for name, data in files.items():
        if name.endswith(".gif"):
            manifest["refuse"].append({"file": name, "message_contains": "GIF images are not supported"})
            continue
        im = Image.open(io.BytesIO(data))
        if im.mode == "CMYK":
            manifest["refuse"].append({"file": name, "message_contains": "CMYK JPEG images are not supported"})
            continue
        rgb = decoded[name] = to_rgb(im)
        out = name.rsplit(".", 1)[0] + ".rgb"
        (args.out / out).write_bytes(np.asarray(rgb).tobytes())
        manifest["decode"].append({"file": name, "width": rgb.width, "height": rgb.height, "rgb": out})

    for source, w, h in [("rgb_37x23.png", 16, 9), ("rgb_37x23.png", 80, 50), ("tall_21x45.png", 21, 30),
                         ("rgba_40x40.png", 40, 7), ("rgb_37x23.png", 33, 8)]:
        out = f"resize_{source.rsplit('.', 1)[0]}_to_{w}x{h}.rgb"
        (args.out / out).write_bytes(np.asarray(decoded[source].resize((w, h), LANCZOS)).tobytes())
        manifest["resize"].append({"source": source, "width": w, "height": h, "rgb": out})

    for source in ["rgb_37x23.png", "tall_21x45.png", "rgba_40x40.png"]:
        size = 32
        pixels = idefics3_pixels(decoded[source], size)
        check_against_transformers(decoded[source], size, pixels)
        out = f"idefics3_{source.rsplit('.', 1)[0]}_{size}.f32"
        (args.out / out).write_bytes(pixels.astype("<f4").tobytes())
        manifest["idefics3"].append({"source": source, "size": size, "f32": out})

    # Wide (3 x 4 tiles), tall (4 x 2), square (4 x 4) and a strip (1 x 4); none stays unsplit,
    # as the longest edge is always resized to 4 tiles.
    manifest["idefics3_views"] = []
    sources = {e["rgb"]: (e["width"], e["height"]) for e in manifest["decode"]}
    sources.update({e["rgb"]: (e["width"], e["height"]) for e in manifest["resize"]})
    for source in ["rgb_37x23.rgb", "tall_21x45.rgb", "rgba_40x40.rgb", "resize_rgba_40x40_to_40x7.rgb"]:
        size = 16
        w, h = sources[source]
        rgb = Image.frombytes("RGB", (w, h), (args.out / source).read_bytes())
        rows, cols, views = transformers_views(rgb, size)
        own_rows, own_cols, own = idefics3_views(rgb, size)
        if (own_rows, own_cols) != (rows, cols) or own.shape != views.shape or np.abs(own - views).max() > 0:
            sys.exit(f"Pillow-only splitting differs from transformers on {source}")
        out = f"idefics3_views_{source.rsplit('.', 1)[0]}_{size}.f32"
        (args.out / out).write_bytes(views.astype("<f4").tobytes())
        manifest["idefics3_views"].append(
            {"rgb": source, "width": w, "height": h, "size": size, "rows": int(rows), "cols": int(cols), "f32": out}
        )

    manifest["idefics3_layouts"] = []
    for w, h, size in [(1280, 800, 384), (800, 1280, 384), (1920, 1080, 512), (1024, 512, 512),
                       (4000, 300, 384), (300, 1200, 384), (1, 1, 384), (640, 640, 512)]:
        rows, cols, _ = transformers_views(Image.new("RGB", (w, h), (90, 120, 150)), size)
        manifest["idefics3_layouts"].append(
            {"width": w, "height": h, "size": size, "rows": int(rows), "cols": int(cols)}
        )

    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(p.stat().st_size for p in args.out.iterdir())
    print(f"wrote {len(list(args.out.iterdir()))} files, {total} bytes, to {args.out}")


if __name__ == "__main__":
    main()
