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

    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(p.stat().st_size for p in args.out.iterdir())
    print(f"wrote {len(list(args.out.iterdir()))} files, {total} bytes, to {args.out}")


if __name__ == "__main__":
    main()
