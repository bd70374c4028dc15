/* Internal: one image file (PNG or JPEG) to the bytes a model reads, the
 * way torchvision's ImageFolder pipeline makes them: decoded to 8-bit,
 * converted to RGB or grey (PIL's convert), the shorter side resized to
 * `resize` with PIL's antialiased bilinear filter (torchvision's Resize),
 * then the centre `height` x `width` cropped (CenterCrop).  Thread-safe:
 * no shared state, errors into the caller's buffer. */
#ifndef SHMTRAIN_DATA_IMAGE_DECODE_H
#define SHMTRAIN_DATA_IMAGE_DECODE_H

#include <stddef.h>
#include <stdint.h>

struct image_target {
    int channels;   /* 1 (grey) or 3 (RGB) */
    int height, width;
    int resize;     /* the shorter side before the crop, >= height and width */
};

/* `out`: channels x height x width bytes.  0, or -1 with one line (without
 * the path) in err. */
int image_decode(const char *path, const struct image_target *t, uint8_t *out, char *err, size_t errlen);

/* PNG or JPEG, by the name's extension (case-insensitive), as ImageFolder
 * picks its files. */
int image_is_supported(const char *name);

#endif
